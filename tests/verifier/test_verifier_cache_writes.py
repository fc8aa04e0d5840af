"""The verifier on the records' optional ``prefix_cache_write_tokens``: read the same on the fast path
(the regular expression) and the slow one (JSON), 0 when absent, summed into the dimension
``cache_write_tokens`` that an invoice line re-rates, and refused where the format refuses it. Exports
are built by hand, as in test_verifier_routed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.records.v2_example import CLAIMS, EXECUTOR_KEY, ROUTER_KEY, V1_PART
from tests.verifier.test_verifier_routed import export_of, keys, v1_record, verdicts
from treemeter_records import canonical_bytes, protocol, sign_record
from treemeter_verify import scan, verify_export
from treemeter_verify.rating import DIMENSIONS
from treemeter_verify.receipts import billed_dimensions
from treemeter_verify.records import fields_of, match_record, parse_record

WRITES = "prefix_cache_write_tokens"
AT = DIMENSIONS.index("cache_write_tokens")


def written(record: dict[str, Any], writes: Any) -> dict[str, Any]:
    return {**record, WRITES: writes}


def routed(writes: int) -> dict[str, Any]:
    """The v2 example with 16 hits and ``writes``, signed by its router and executor."""
    claims = {**CLAIMS, "path": list(CLAIMS["path"]), "preheat": [list(p) for p in CLAIMS["preheat"]]}
    decision = protocol.sign_decision(ROUTER_KEY, claims)
    return sign_record({**V1_PART, "prefix_cache_hit_tokens": 16, WRITES: writes}, decision, EXECUTOR_KEY)


def test_the_dimension_sits_after_the_cache_hits() -> None:
    assert DIMENSIONS[AT - 1 : AT + 1] == ("cached_tokens", "cache_write_tokens")


@pytest.mark.parametrize("writes", [1, 48, 64])
def test_both_paths_read_the_field(writes: int) -> None:
    line = canonical_bytes(written(v1_record(), writes))  # tokens_in 64, no hits
    assert match_record(line) is not None
    fields = fields_of(line)
    assert fields is not None and fields == parse_record(line)
    assert fields[7][AT] == writes
    v2 = canonical_bytes(routed(48))
    assert fields_of(v2) is not None and fields_of(v2)[7][AT] == 48  # type: ignore[index]


def test_absent_is_zero() -> None:
    line = canonical_bytes(v1_record())
    fields = fields_of(line)
    assert fields is not None and fields == parse_record(line) and fields[7][AT] == 0


@pytest.mark.parametrize("writes", [0, -1, 65, 2**32, 2**32 + 10, True, "8", None])
def test_what_the_format_refuses_is_no_record(writes: Any) -> None:
    line = canonical_bytes(written(v1_record(), writes))
    assert match_record(line) is None
    assert fields_of(line) is None and parse_record(line) is None


def test_hits_and_writes_together_within_tokens_in() -> None:
    record = {**v1_record(), "prefix_cache_hit_tokens": 32}
    assert fields_of(canonical_bytes(written(record, 32))) is not None
    line = canonical_bytes(written(record, 33))
    assert match_record(line) is None and fields_of(line) is None


def _priced(records: list[dict[str, Any]], quantity: int, amount: str) -> tuple[dict[str, Any], list[bytes]]:
    manifest, lines = export_of(records)
    line = {"kind": "usage", "dimension": "cache_write_tokens", "quantity": str(quantity), "amount": amount}
    manifest["invoice"]["lines"].append(line)
    manifest["prices"]["cache_write_tokens"] = {
        "charge_model": "per_unit",
        "included_quantity": "0",
        "properties": {"unit_price": "0.01"},
    }
    return manifest, lines


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_invoice_line_on_cache_writes_is_re_rated(monkeypatch: pytest.MonkeyPatch, jobs: int) -> None:
    monkeypatch.setattr(scan, "LINES_PER_JOB", 1)
    # One v1 record alone (its run read whole on the fast path), then with a routed one (line by line).
    for records, total in (([written(v1_record(), 48)], 48), ([routed(32), written(v1_record(), 48)], 80)):
        manifest, lines = _priced(records, total, f"{total / 100:.2f}")
        report = verify_export(manifest, lines, keys(), jobs=jobs)
        assert verdicts(report)["line usage cache_write_tokens"] == (
            True,
            f"{total} × 0.01 = {total / 100:.2f} CNY",
        )
        assert report.ok, report.verdicts


def test_a_stated_quantity_the_records_do_not_give_is_refused() -> None:
    manifest, lines = _priced([v1_record()], 48, "0.48")  # the record wrote nothing
    report = verify_export(manifest, lines, keys())
    assert verdicts(report)["line usage cache_write_tokens"][0] is False
    assert "the records give 0" in verdicts(report)["line usage cache_write_tokens"][1]


def test_a_receipt_shows_the_cache_writes() -> None:
    rows = dict(billed_dimensions(canonical_bytes(written(v1_record(), 48))))
    assert rows["prompt tokens written to the prefix cache"] == "48"
    assert (
        dict(billed_dimensions(canonical_bytes(v1_record())))["prompt tokens written to the prefix cache"]
        == "0"
    )
