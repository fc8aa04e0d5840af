"""The verifier re-rates custom-metric lines (issue 21.8): each metric's quantity re-measured from the
export's billable records and the pinned expression (its aggregation included), its amount from the
pinned terms under the charge model, per price version when the price changed within the period. A real
export of a finalised invoice (real ingest, ClickHouse, billing and ledger), then tampered lines, each
named with the line and by how much it differs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from billing.services import finalize_invoice
from contracts.models import ContractPrice
from contracts.services import set_metric
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from tests.factories import ContractFactory, SigningAgent, signing_agent
from tests.ledger.support import member_client, november_invoice, pinned_keys, send
from treemeter_records import new_record_id
from treemeter_verify import verify_export
from treemeter_verify.check import read_export

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
D = Decimal
CHANGE = datetime(2026, 11, 10, tzinfo=UTC)
WEIGHTING = "distinct_experts * hops * (1 - cache_hit_ratio)"  # seed 000's


def _ns(day: int) -> int:
    return int(datetime(2026, 11, day, tzinfo=UTC).timestamp()) * 10**9


def _export(
    client: Client, metrics: dict[str, str], prices: list[dict[str, Any]], records: list[dict[str, Any]]
) -> tuple[dict[str, Any], Sequence[bytes], SigningAgent]:
    """A finalised November invoice of a contract with these metrics and prices, over these records
    (field overrides; `id` orders their record ids), and its export."""
    contract = ContractFactory.create()
    for code, expression in metrics.items():
        set_metric(contract, code, code.replace("_", " "), expression)
    for price in prices:
        ContractPrice.objects.create(contract=contract, **price)
    agent = signing_agent(contract)
    base = new_record_id()[:24]
    sent = [
        agent.record(
            contract,
            **{k: v for k, v in r.items() if k != "id"},
            **({"record_id": f"{base}{r['id']:012x}"} if "id" in r else {}),
        )
        for r in records
    ]
    send(client, agent, sent)
    invoice = finalize_invoice(november_invoice(contract))
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    body = member_client(contract, "alice").get(f"/v1/ledger/invoices/{invoice.pk}/export").content
    manifest, lines = read_export(body)
    return manifest, lines, agent


def _verdicts(
    manifest: dict[str, Any], lines: Sequence[bytes], agent: SigningAgent
) -> dict[str, tuple[bool, str]]:
    report = verify_export(manifest, lines, pinned_keys(agent))
    return {v.check: (v.ok, v.detail) for v in report.verdicts if v.check.startswith("line usage")}


def _line(manifest: dict[str, Any], code: str, k: int = 0) -> dict[str, Any]:
    return [x for x in manifest["invoice"]["lines"] if x["dimension"] == code][k]


def test_a_metric_line_is_re_rated_and_a_tampered_quantity_or_amount_is_named(client: Client) -> None:
    manifest, lines, agent = _export(
        client,
        {"weighted": WEIGHTING},
        [{"dimension": "weighted", "unit_price": D("0.01")}],
        [{"start_ns": _ns(day)} for day in (3, 4, 5, 6)],
    )
    assert manifest["invoice"]["metrics"] == {"weighted": WEIGHTING}
    # Each record: 3 experts × 5 hops × (1 − 2 hits / 3 lookups), 5.000000000000001 in doubles (the decimal
    # 5.000000000000001024); four: 20.000000000000004096, billed 20.000000 × 0.01 = 0.20.
    assert (_line(manifest, "weighted")["quantity"], _line(manifest, "weighted")["amount"]) == (
        "20.000000",
        "0.20",
    )
    report = verify_export(manifest, lines, pinned_keys(agent))
    assert report.ok, [v for v in report.verdicts if not v.ok]
    assert _verdicts(manifest, lines, agent)["line usage weighted"] == (
        True,
        f"quantity 20.000000 (sum of {WEIGHTING}) × 0.01 = 0.20 CNY",
    )

    _line(manifest, "weighted")["quantity"] = "21.000000"
    assert _verdicts(manifest, lines, agent)["line usage weighted"] == (
        False,
        "quantity 21.000000 but the records give 20.000000 (off by 1.000000)",
    )
    _line(manifest, "weighted")["quantity"] = "20.000000"
    _line(manifest, "weighted")["amount"] = "0.25"
    assert _verdicts(manifest, lines, agent)["line usage weighted"] == (
        False,
        "amount 0.25 CNY but the pinned terms give 0.20 (off by 0.05 CNY)",
    )


# 10 on the 3rd, 40 on the 5th, 70 and 25 on the 20th (25 has the greater record id), a failed 60.
TIED: list[dict[str, Any]] = [
    {"id": 1, "start_ns": _ns(3), "tokens_in": 10},
    {"id": 2, "start_ns": _ns(5), "tokens_in": 40},
    {"id": 4, "start_ns": _ns(20), "tokens_in": 25},
    {"id": 3, "start_ns": _ns(20), "tokens_in": 70},
    {"id": 5, "start_ns": _ns(25), "tokens_in": 60, "status": "error"},
]
AGGREGATIONS = {
    # 10 + 40 + 25 + 70 = 145 × 0.10
    "sum": ("tokens_in", "quantity 145.000000 (sum of tokens_in) × 0.1 = 14.50 CNY"),
    "period_max": ("period_max(tokens_in)", "quantity 70.000000 (period max of tokens_in) × 0.1 = 7.00 CNY"),
    # the tie on the 20th: the greater record id's 25
    "latest": ("latest(tokens_in)", "quantity 25.000000 (latest of tokens_in) × 0.1 = 2.50 CNY"),
    "unique_count": (
        "unique_count(tokens_in)",
        "quantity 4.000000 (unique count of tokens_in) × 0.1 = 0.40 CNY",
    ),
    # 10 × 2 days + 40 × 15 + 70 × 0 (the tie's other) + 25 × 11 = 895 / 30 = 29.833333 × 0.1 = 2.98
    "time_weighted_sum": (
        "time_weighted_sum(tokens_in)",
        "quantity 29.833333 (time-weighted sum of tokens_in) × 0.1 = 2.98 CNY",
    ),
}


@pytest.mark.parametrize("aggregation", list(AGGREGATIONS))
def test_each_aggregation_is_re_measured_from_the_records(client: Client, aggregation: str) -> None:
    expression, good = AGGREGATIONS[aggregation]
    manifest, lines, agent = _export(
        client, {"usage_m": expression}, [{"dimension": "usage_m", "unit_price": D("0.10")}], TIED
    )

    assert _verdicts(manifest, lines, agent)["line usage usage_m"] == (True, good)
    stated = D(_line(manifest, "usage_m")["quantity"])
    _line(manifest, "usage_m")["quantity"] = str(stated + 1)
    ok, detail = _verdicts(manifest, lines, agent)["line usage usage_m"]
    assert not ok and detail == f"quantity {stated + 1} but the records give {stated} (off by 1.000000)"


def test_a_graduated_charge_on_a_metric(client: Client) -> None:
    tiers = [{"up_to": 100, "unit_price": "0.10"}, {"unit_price": "0.05", "flat_fee": "1.00"}]
    manifest, lines, agent = _export(
        client,
        {"total_in": "sum(tokens_in)"},
        [
            {
                "dimension": "total_in",
                "charge_model": "graduated",
                "properties": {"tiers": tiers},
                "included_quantity": D(20),
            }
        ],
        TIED,
    )
    # 145 − 20 included = 125: 100 × 0.10 + 25 × 0.05 + the second tier's 1.00 = 12.25
    assert _line(manifest, "total_in")["amount"] == "12.25"
    assert _verdicts(manifest, lines, agent)["line usage total_in"] == (
        True,
        "quantity 145.000000 (sum of tokens_in) at graduated = 12.25 CNY",
    )
    _line(manifest, "total_in")["amount"] = "12.75"
    assert _verdicts(manifest, lines, agent)["line usage total_in"] == (
        False,
        "amount 12.75 CNY but the pinned terms give 12.25 (off by 0.50 CNY)",
    )


def test_a_price_change_splits_additive_metrics_by_their_records_and_not_a_period_max(client: Client) -> None:
    metrics = {
        "total_in": "tokens_in",
        "held_in": "time_weighted_sum(tokens_in)",
        "peak_in": "period_max(tokens_in)",
    }
    prices = [
        {"dimension": code, "unit_price": price, **({"effective_from": CHANGE} if k else {})}
        for code in metrics
        for k, price in enumerate((D("0.10"), D("0.20")))
    ]
    records = [{"start_ns": _ns(3), "tokens_in": 10}, {"start_ns": _ns(5), "tokens_in": 40}]
    manifest, lines, agent = _export(
        client, metrics, prices, [*records, {"start_ns": _ns(20), "tokens_in": 25}]
    )
    assert [
        (x["dimension"], x["quantity"], x["amount"], x.get("effective_from"))
        for x in manifest["invoice"]["lines"]
        if x["kind"] == "usage"
    ] == [
        # before the 10th: 50 × 0.10; after: 25 × 0.20
        ("held_in", "20.666667", "2.07", ""),  # (10 × 2 days + 40 × 15) / 30 × 0.10
        ("held_in", "9.166667", "1.83", CHANGE.isoformat()),  # 25 × 11 / 30 × 0.20
        ("peak_in", "40.000000", "8.00", None),  # one line, at the version in force at the end
        ("total_in", "50.000000", "5.00", ""),
        ("total_in", "25.000000", "5.00", CHANGE.isoformat()),
    ]
    report = verify_export(manifest, lines, pinned_keys(agent))
    assert report.ok, [v for v in report.verdicts if not v.ok]
    assert _verdicts(manifest, lines, agent) == {
        "line usage held_in": (
            True,
            "quantity 29.833334 (time-weighted sum of tokens_in) over 2 price versions = 3.90 CNY",
        ),
        "line usage peak_in": (True, "quantity 40.000000 (period max of tokens_in) × 0.2 = 8.00 CNY"),
        "line usage total_in": (
            True,
            "quantity 75.000000 (sum of tokens_in) over 2 price versions = 10.00 CNY",
        ),
    }

    # Moving 10 units into the cheaper version keeps the total: the records' split still names both.
    _line(manifest, "total_in", 0)["quantity"] = "60.000000"
    _line(manifest, "total_in", 1)["quantity"] = "15.000000"
    ok, detail = _verdicts(manifest, lines, agent)["line usage total_in"]
    assert not ok
    assert detail == (
        "version from the contract start: quantity 60.000000 but the records give 50.000000 "
        f"(off by 10.000000); version from {CHANGE.isoformat()}: quantity 15.000000 but the records give "
        "25.000000 (off by -10.000000)"
    )
    _line(manifest, "held_in", 1)["amount"] = "1.93"
    ok, detail = _verdicts(manifest, lines, agent)["line usage held_in"]
    assert (ok, detail) == (
        False,
        f"version from {CHANGE.isoformat()}: amount 1.93 CNY but its terms give 1.83 (off by 0.10 CNY)",
    )


def test_an_export_without_pinned_metrics_skips_the_line_and_an_unknown_dimension_fails(
    client: Client,
) -> None:
    manifest, lines, agent = _export(
        client,
        {"weighted": WEIGHTING},
        [{"dimension": "weighted", "unit_price": D("0.01")}],
        [{"start_ns": _ns(3)}],
    )
    manifest["invoice"]["lines"].append(
        {"kind": "usage", "dimension": "bogus", "quantity": "1", "unit_price": "0", "amount": "0.00"}
    )
    assert _verdicts(manifest, lines, agent)["line usage bogus"] == (
        False,
        "neither a built-in dimension nor a metric of the pinned terms",
    )

    del manifest["invoice"]["metrics"]  # an export made before the metrics were pinned in it
    report = verify_export(manifest, lines, pinned_keys(agent))
    [verdict] = [v for v in report.verdicts if v.check == "line usage weighted"]
    assert verdict.skipped and verdict.detail == "not derived from records: not re-rated"
