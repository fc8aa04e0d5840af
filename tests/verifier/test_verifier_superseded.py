"""The verifier on retries: a routed record whose decision ``supersedes`` earlier attempts of its request
(docs/record-format.md) leaves those records of its tenant and contract out of the billable usage, and a
malformed claim fails the routing check. Exports are built by hand, as in test_verifier_routed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.records.v2_example import V1_PART, v2_record
from tests.verifier.test_verifier_routed import (
    CHECK,
    RID,
    decided,
    export_of,
    keys,
    resigned,
    routing,
    v1_record,
    verdicts,
)
from treemeter_verify import Report, scan, verify_export

RETRY_ID = "01936f4e-8a2b-7c3d-9e4f-5a6b7c8d9e11"
SUPERSEDED = "superseded attempts"
LINE = "line usage tokens_out"
RETRY_TOKENS_OUT = 20  # the first attempt has 16


def retry(supersedes: Any, **fields: Any) -> dict[str, Any]:
    """A routed record, one seq after the v2 example, whose decision claims ``supersedes``."""
    record = {**v2_record(), "record_id": RETRY_ID, "seq": 8, "tokens_out": RETRY_TOKENS_OUT, **fields}
    return decided(record, record_id=RETRY_ID, supersedes=supersedes)


def billing(manifest: dict[str, Any], tokens_out: int) -> dict[str, Any]:
    """``manifest`` with its tokens_out line billing this quantity (the same 16 over the included)."""
    invoice, prices = manifest["invoice"], manifest["prices"]
    line = {**invoice["lines"][0], "quantity": str(tokens_out)}
    terms = {**prices["tokens_out"], "included_quantity": str(tokens_out - 16)}
    return {**manifest, "invoice": {**invoice, "lines": [line]}, "prices": {**prices, "tokens_out": terms}}


def verify(records: list[dict[str, Any]], billed: int | None = None, jobs: int = 1) -> Report:
    manifest, lines = export_of(records)
    return verify_export(manifest if billed is None else billing(manifest, billed), lines, keys(), jobs=jobs)


def failed(report: Report) -> set[str]:
    return {v.check for v in report.verdicts if not v.ok}


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("first", ["v2", "v1"])
def test_a_superseded_attempt_is_not_billed(monkeypatch: pytest.MonkeyPatch, first: str, jobs: int) -> None:
    monkeypatch.setattr(scan, "LINES_PER_JOB", 1)  # with jobs=2: the attempt and its retry in two scanners
    attempt = v2_record() if first == "v2" else {**v1_record(), "seq": 7}
    report = verify([attempt, retry([attempt["record_id"]])], billed=RETRY_TOKENS_OUT, jobs=jobs)
    assert report.ok, report.verdicts
    assert verdicts(report)[SUPERSEDED] == (True, "1 records superseded by retries, not billed")
    assert verdicts(report)[LINE] == (True, "20 × 0.01 = 0.16 CNY")
    assert verdicts(report)[CHECK][0]


def test_an_invoice_that_bills_the_superseded_attempt_too_fails() -> None:
    report = verify([v2_record(), retry([RID])])  # export_of bills every ok record: 16 + 20
    assert failed(report) == {LINE}
    problems = (
        "quantity 36 but the records give 20; "
        "amount 0.16 CNY but the contract terms give 0.00 (off by 0.16 CNY)"
    )
    assert verdicts(report)[LINE] == (False, problems)


def test_a_superseded_attempt_that_failed_is_counted_and_takes_nothing_off() -> None:
    attempt = resigned({**v2_record(), "status": "error"})
    report = verify([attempt, retry([RID])], billed=RETRY_TOKENS_OUT)
    assert report.ok, report.verdicts
    assert verdicts(report)[SUPERSEDED] == (True, "1 records superseded by retries, not billed")


def test_an_export_without_retries_skips_the_check() -> None:
    report = verify([v2_record(), v1_record()], billed=32)
    assert report.ok, report.verdicts
    assert [(v.skipped, v.detail) for v in report.verdicts if v.check == SUPERSEDED] == [
        (True, "no record superseded by a retry")
    ]


def test_an_attempt_not_in_the_export_takes_nothing_off() -> None:
    report = verify([v2_record(), retry(["01936f4e-8a2b-7c3d-9e4f-5a6b7c8d9eff"])])
    assert report.ok, report.verdicts
    assert verdicts(report)[SUPERSEDED][1] == "no record superseded by a retry"


WHERE = "decision.claims.supersedes"
MALFORMED: dict[str, tuple[Any, str]] = {
    "not a UUIDv7": (["01936f4e-8a2b-4c3d-9e4f-5a6b7c8d9e0f"], f"{WHERE} holds UUIDv7 record ids"),
    "not a string": ([7], f"{WHERE} holds UUIDv7 record ids"),
    "names the retry itself": ([RETRY_ID], f"{WHERE} must be distinct earlier attempts, not this record"),
    "names an attempt twice": ([RID, RID], f"{WHERE} must be distinct earlier attempts, not this record"),
    "empty": ([], f"{WHERE} must be a list of 1..8 record ids"),
    "more than 8": (
        [f"01936f4e-8a2b-7c3d-9e4f-5a6b7c8d9e{n:02x}" for n in range(9)],
        f"{WHERE} must be a list of 1..8 record ids",
    ),
    "not a list": (RID, f"{WHERE} must be a list of 1..8 record ids"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_supersedes_claim_is_named_and_takes_nothing_off(case: str) -> None:
    claim, problem = MALFORMED[case]
    # routing() also asserts that every other check passes: the invoice bills both records, 16 + 20.
    assert routing([v2_record(), retry(claim)]) == (False, f"{RETRY_ID}: {problem}")


@pytest.mark.parametrize("moved", ["attempt", "retry"])
def test_a_retry_of_another_contract_does_not_supersede(moved: str) -> None:
    other = {"contract": "ctr-2026-999"}
    attempt = resigned({**v2_record(), **other}) if moved == "attempt" else v2_record()
    again = retry([RID], **other) if moved == "retry" else retry([RID])
    report = verify([attempt, again])  # bills both: 16 + 20
    assert failed(report) == {"records belong to the invoice"}
    assert verdicts(report)[LINE] == (True, "36 × 0.01 = 0.16 CNY")
    assert verdicts(report)[SUPERSEDED][1] == "no record superseded by a retry"


def test_lines_that_are_not_records_do_not_misplace_the_superseded_one() -> None:
    manifest, lines = export_of([v2_record(), retry([RID])])
    manifest = billing(manifest, RETRY_TOKENS_OUT)
    manifest["runs"] = [[1, None, None, None], *manifest["runs"]]
    manifest["invoice"]["record_count"] += 1
    report = verify_export(manifest, [json.dumps({**V1_PART, "seq": None}).encode(), *lines], keys())
    assert failed(report) == {"records belong to the invoice"}, report.verdicts
    assert verdicts(report)[SUPERSEDED] == (True, "1 records superseded by retries, not billed")
    assert verdicts(report)[LINE] == (True, "20 × 0.01 = 0.16 CNY")
