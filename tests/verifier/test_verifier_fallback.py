"""The verifier on a fallback: a routed record whose decision claims ``fallback_from`` (its subtree's
breaker was open, so the subtree's fallback served it, docs/scheduler.md) verifies like any routed
record, and a malformed claim fails the routing check by name. Exports are built by hand, as in
test_verifier_routed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.records.v2_example import CLAIMS, v2_record
from tests.verifier.test_verifier_routed import RID, decided, routing, v1_record

PASSES = (True, "1 routed records signed by their executors and pinned routers, as decided")
WHERE = "decision.claims.fallback_from"


def test_a_record_served_by_the_fallback_verifies() -> None:
    record = decided(v2_record(), fallback_from="legal-gpu")
    assert record["decision"]["claims"]["subtree"] == CLAIMS["subtree"] != "legal-gpu"
    assert routing([record, v1_record()]) == PASSES


MALFORMED: dict[str, tuple[Any, str]] = {
    "its own subtree": (CLAIMS["subtree"], f"{WHERE} must be another subtree"),
    "no slug": ("Legal GPU", f"{WHERE} must match ^[a-z0-9][a-z0-9._-]{{0,63}}$"),
    "a number": (7, f"{WHERE} must match ^[a-z0-9][a-z0-9._-]{{0,63}}$"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_fallback_claim_is_named(case: str) -> None:
    claim, problem = MALFORMED[case]
    assert routing([decided(v2_record(), fallback_from=claim), v1_record()]) == (False, f"{RID}: {problem}")
