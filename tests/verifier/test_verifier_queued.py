"""The verifier on queued jobs: a routed record whose decision claims ``queued_us`` (the router took the
job from its durable queue, docs/record-format.md) starts at the router's receipt, ``decided_ns`` −
(``l1_in_us`` + ``queued_us``) × 1000, and a malformed claim fails the routing check. Exports are built
by hand, as in test_verifier_routed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.records.v2_example import CLAIMS, v2_record
from tests.verifier.test_verifier_routed import (
    CHECK,
    RID,
    decided,
    export_of,
    keys,
    routing,
    v1_record,
    verdicts,
)
from tests.verifier.test_verifier_superseded import RETRY_ID, RETRY_TOKENS_OUT, SUPERSEDED, retry, verify
from treemeter_verify import scan, verify_export

QUEUED_US = 5_000  # 5 ms in the router's queue
PASSES = (True, "1 routed records signed by their executors and pinned routers, as decided")


def queued(record: dict[str, Any], queued_us: Any = QUEUED_US, **claims: Any) -> dict[str, Any]:
    """``record`` with a decision that claims ``queued_us``, dispatched that much after the example's
    decision: the record's start is still the router's receipt."""
    return decided(record, queued_us=queued_us, decided_ns=CLAIMS["decided_ns"] + QUEUED_US * 1000, **claims)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_queued_record_that_starts_at_the_receipt_verifies(
    monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    monkeypatch.setattr(scan, "LINES_PER_JOB", 1)  # with jobs=2: one forked scanner per record
    record = queued(v2_record())
    claims = record["decision"]["claims"]
    assert record["start_ns"] == claims["decided_ns"] - (claims["l1_in_us"] + claims["queued_us"]) * 1000
    manifest, lines = export_of([record, v1_record()])
    report = verify_export(manifest, lines, keys(), jobs=jobs)
    assert report.ok, report.verdicts
    assert verdicts(report)[CHECK] == PASSES
    assert verdicts(report)["line usage tokens_out"] == (True, "32 × 0.01 = 0.16 CNY")


def test_a_queued_record_that_ignores_the_queue_time_disagrees() -> None:
    # The decision is the one above, but the record starts at decided_ns - l1_in_us: the queue hop left out.
    record = decided(v2_record(), queued_us=QUEUED_US)
    claims = record["decision"]["claims"]
    assert record["start_ns"] == claims["decided_ns"] - claims["l1_in_us"] * 1000
    problem = f"{RID}: start_ns is not decided_ns - (l1_in_us + queued_us) × 1000"
    assert routing([record, v1_record()]) == (False, problem)


def test_a_record_without_the_claim_keeps_the_plain_start_rule() -> None:
    problem = f"{RID}: start_ns is not decided_ns - l1_in_us × 1000"
    assert routing([decided(v2_record(), decided_ns=CLAIMS["decided_ns"] + QUEUED_US * 1000)]) == (
        False,
        problem,
    )


WHERE = "decision.claims.queued_us"
MALFORMED: dict[str, tuple[Any, str]] = {
    "zero": (0, f"{WHERE} must be in [1, 1099511627776)"),
    "negative": (-1, f"{WHERE} must not be negative"),
    "a boolean": (True, f"{WHERE} must be an integer"),
    "2**40": (2**40, f"{WHERE} must be in [1, 1099511627776)"),
    "a string": ("5", f"{WHERE} must be an integer"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_queued_us_claim_is_named(case: str) -> None:
    claim, problem = MALFORMED[case]
    # routing() also asserts that every other check passes.
    assert routing([queued(v2_record(), claim), v1_record()]) == (False, f"{RID}: {problem}")


def test_the_largest_queued_us_is_accepted() -> None:
    last = 2**40 - 1
    record = decided(v2_record(), queued_us=last, decided_ns=CLAIMS["decided_ns"] + last * 1000)
    assert routing([record, v1_record()]) == PASSES


def test_a_queued_retry_supersedes_its_attempt() -> None:
    again = retry([RID])
    again = queued(again, record_id=RETRY_ID, supersedes=[RID])
    report = verify([v2_record(), again], billed=RETRY_TOKENS_OUT)
    assert report.ok, report.verdicts
    assert verdicts(report)[CHECK] == (
        True,
        "2 routed records signed by their executors and pinned routers, as decided",
    )
    assert verdicts(report)[SUPERSEDED] == (True, "1 records superseded by retries, not billed")
