"""Custom-metric aggregations: sum, period max, unique count, latest and time-weighted sum, computed in
ClickHouse by the rating query and priced with every charge model. Real records through ingest, real
ClickHouse and PostgreSQL; every expected figure is computed by hand in the comments."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from billing.models import Invoice
from billing.selectors import ContractMeter, rated_contracts, usage_by_contract
from billing.services import generate_invoice
from clickhouse_store.queries.billing import usage_sql
from common.periods import month_bounds
from contracts.models import Contract, ContractPrice
from contracts.services import set_metric
from pricing.errors import TermsError
from pricing.expressions import parse_metric
from tests.billing.usage import at, send, send_each
from tests.factories import ContractFactory

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]
D = Decimal
NOV, DEC, JAN = month_bounds("2026-11"), month_bounds("2026-12"), month_bounds("2027-01")
DEC_2, JAN_2, FEB_2 = (datetime(y, m, 2, tzinfo=UTC) for y, m in ((2026, 12), (2027, 1), (2027, 2)))
METRICS = {
    "total_in": "tokens_in",
    "peak_in": "period_max(tokens_in)",
    "distinct_in": "unique_count(tokens_in)",
    "last_in": "latest(tokens_in)",
    "held_in": "time_weighted_sum(tokens_in)",
}


def november_records(contract: Contract) -> list[dict[str, Any]]:
    """10 on the 3rd, 40 on the 5th, 25 on the 20th; a failed 60 on the 25th; 99 in October."""
    return send_each(
        contract,
        [
            {"start_ns": at(2026, 11, 3), "tokens_in": 10},
            {"start_ns": at(2026, 11, 5), "tokens_in": 40},
            {"start_ns": at(2026, 11, 20), "tokens_in": 25},
            {"start_ns": at(2026, 11, 25), "tokens_in": 60, "status": "error"},
            {"start_ns": at(2026, 10, 31), "tokens_in": 99},
        ],
    )


def measure(contract: Contract, period: tuple[datetime, datetime], **kwargs: Any) -> dict[str, Decimal]:
    meter = ContractMeter(contract.tenant.code, contract.code, METRICS, **kwargs)
    usage = usage_by_contract([meter], *period)[contract.code]
    return {code: usage.quantities[code] for code in METRICS}


def test_each_aggregation_of_a_period_in_one_query() -> None:
    contract = ContractFactory.create()
    november_records(contract)

    assert measure(contract, NOV) == {
        "total_in": D(75),  # 10 + 40 + 25 (the failed 60 and October's 99 are not billed)
        "peak_in": D(40),
        "distinct_in": D(3),  # 10, 40, 25
        "last_in": D(25),  # the 20th's
        # 10 held 2 days (3rd → 5th), 40 held 15 (5th → 20th), 25 held 11 (20th → Dec 1st), over 30
        # days: (20 + 600 + 275) / 30 = 29.8333…, billed to 6 places
        "held_in": D("29.833333"),
    }
    sql, _, columns, period_columns = usage_sql(
        rated_contracts([ContractMeter(contract.tenant.code, contract.code, METRICS)]), *NOV
    )
    assert sql.count(" FROM ") == 1 and len(columns) == 5
    assert set(period_columns) == {"period_max(tokens_in)", "unique_count(tokens_in)", "latest(tokens_in)"}


def test_an_empty_period_is_zero_for_every_aggregation() -> None:
    contract = ContractFactory.create()
    november_records(contract)

    assert measure(contract, DEC) == dict.fromkeys(METRICS, D(0))


def test_ties_take_the_record_with_the_greater_id() -> None:
    """Two records at one instant: `latest` takes the one with the greater record id (as text), and for
    the time-weighted sum the other is held for no time. Equal values count once in a unique count."""
    contract = ContractFactory.create()
    sent = send_each(
        contract,
        [
            {"start_ns": at(2026, 11, 1), "tokens_in": 12},
            {"start_ns": at(2026, 11, 16), "tokens_in": 30},
            {"start_ns": at(2026, 11, 16), "tokens_in": 90},
            {"start_ns": at(2026, 11, 16, 12), "tokens_in": 12},
            {"start_ns": at(2026, 11, 16, 12), "tokens_in": 12},
        ],
    )
    tied = sorted(sent[1:3], key=lambda r: r["record_id"])
    winner = tied[-1]["tokens_in"]

    quantities = measure(contract, NOV)

    assert quantities["peak_in"] == D(90)
    assert quantities["distinct_in"] == D(3)  # 12, 30, 90
    assert quantities["last_in"] == D(12)  # the two of the 16th at noon agree
    # 12 held 15 days (1st → 16th), the tie's winner half a day, 12 held 14.5 days: over 30 days
    held = (D(12) * 15 + D(winner) * D("0.5") + D(12) * D("14.5")) / 30
    assert quantities["held_in"] == held.quantize(D("0.000001"))
    assert measure(contract, NOV)["held_in"] in (D("12.300000"), D("13.300000"))  # 30 or 90 won


def test_a_segment_split_does_not_split_a_non_additive_figure() -> None:
    """Another dimension's price change cuts the period in two segments; the max, unique count and
    latest are still the whole period's, and the time-weighted sum adds up over the segments."""
    contract = ContractFactory.create()
    november_records(contract)
    change = datetime(2026, 11, 10, tzinfo=UTC)

    whole = measure(contract, NOV)
    split = measure(contract, NOV, bounds=(change,))

    assert split == whole
    meter = ContractMeter(contract.tenant.code, contract.code, METRICS, (change,))
    segments = usage_by_contract([meter], *NOV)[contract.code].segments
    # Before the 10th: 10 and 40 (40 held 5 of its 15 days there: it is attributed by its start).
    assert [s.quantities["peak_in"] for s in segments] == [D(40), D(25)]
    # 10 × 2 days + 40 × 15 days (to the 20th, past the cut) = 620; then 25 × 11 = 275; over 30 days.
    # Each segment is rounded to 6 places; the period's figure is the exact sum, rounded once.
    assert [s.quantities["held_in"] for s in segments] == [D("20.666667"), D("9.166667")]


SCENARIOS: dict[str, tuple[dict[str, Any], dict[str, Decimal]]] = {
    # quantities: total 75, peak 40, distinct 3, last 25, held 29.833333
    "per_unit": (
        {"unit_price": "0.10"},
        # 7.50, 4.00, 0.30, 2.50, 2.9833333 → 2.98
        {
            "total_in": D("7.50"),
            "peak_in": D("4.00"),
            "distinct_in": D("0.30"),
            "last_in": D("2.50"),
            "held_in": D("2.98"),
        },
    ),
    "graduated": (
        {"tiers": [{"up_to": 30, "unit_price": "0.10"}, {"unit_price": "0.05"}]},
        # 30 × 0.10 + 45 × 0.05 = 5.25; 3.00 + 10 × 0.05 = 3.50; 0.30; 2.50; 2.9833333 → 2.98
        {
            "total_in": D("5.25"),
            "peak_in": D("3.50"),
            "distinct_in": D("0.30"),
            "last_in": D("2.50"),
            "held_in": D("2.98"),
        },
    ),
    "volume": (
        {"tiers": [{"up_to": 30, "unit_price": "0.10"}, {"unit_price": "0.05"}]},
        # 75 × 0.05 = 3.75; 40 × 0.05 = 2.00; 3 × 0.10; 25 × 0.10; 29.833333 × 0.10 = 2.98
        {
            "total_in": D("3.75"),
            "peak_in": D("2.00"),
            "distinct_in": D("0.30"),
            "last_in": D("2.50"),
            "held_in": D("2.98"),
        },
    ),
    "package": (
        {"package_size": "10", "package_price": "1.00"},
        # started blocks of 10: 8, 4, 1, 3, 3
        {
            "total_in": D("8.00"),
            "peak_in": D("4.00"),
            "distinct_in": D("1.00"),
            "last_in": D("3.00"),
            "held_in": D("3.00"),
        },
    ),
    "percentage": (
        {"rate": "0.10", "fixed_fee": "0.02"},
        # no value field on a metric: 0.02 per unit: 1.50, 0.80, 0.06, 0.50, 0.5966667 → 0.60
        {
            "total_in": D("1.50"),
            "peak_in": D("0.80"),
            "distinct_in": D("0.06"),
            "last_in": D("0.50"),
            "held_in": D("0.60"),
        },
    ),
}


@pytest.mark.parametrize("charge_model", list(SCENARIOS))
def test_every_aggregation_is_priced_by_every_charge_model(charge_model: str) -> None:
    properties, amounts = SCENARIOS[charge_model]
    contract = ContractFactory.create()
    for code, expression in METRICS.items():
        set_metric(contract, code, code, expression)
        ContractPrice.objects.create(
            contract=contract, dimension=code, charge_model=charge_model, properties=properties
        )
    november_records(contract)

    invoice = generate_invoice(contract.pk, *NOV, now=DEC_2)

    lines = {line.dimension: line.amount for line in invoice.lines.filter(kind="usage")}
    assert lines == amounts
    assert invoice.subtotal == sum(amounts.values(), D(0))


def test_a_late_record_that_raises_the_max_is_billed_once_as_the_difference() -> None:
    contract = ContractFactory.create()
    set_metric(contract, "peak_in", "Peak input", "period_max(tokens_in)")
    ContractPrice.objects.create(contract=contract, dimension="peak_in", unit_price=D("0.50"))
    send(contract, 3, at(2026, 11, 3), tokens_in=40)
    november = generate_invoice(contract.pk, *NOV, now=DEC_2)
    assert november.total == D("20.00")  # a peak of 40 × 0.50

    send(contract, 1, at(2026, 11, 10), tokens_in=100)  # late: the peak is now 100
    send(contract, 1, at(2026, 11, 12), tokens_in=70)  # late, below the new peak
    december = generate_invoice(contract.pk, *DEC, now=JAN_2)

    [line] = december.lines.filter(kind="adjustment")
    # The peak rose by 60: 100 × 0.50 − 40 × 0.50 = 30.00
    assert (line.dimension, line.quantity, line.amount) == ("peak_in", D(60), D("30.00"))
    assert generate_invoice(contract.pk, *JAN, now=FEB_2).lines.filter(kind="adjustment").count() == 0


def test_a_price_change_prices_a_period_max_once_at_the_version_in_force_at_the_end() -> None:
    """A max is one figure of the period: it is not cut at the price change (a sum would be)."""
    contract = ContractFactory.create()
    set_metric(contract, "peak_in", "Peak input", "period_max(tokens_in)")
    ContractPrice.objects.create(contract=contract, dimension="peak_in", unit_price=D("0.50"))
    ContractPrice.objects.create(
        contract=contract,
        dimension="peak_in",
        unit_price=D("0.20"),
        effective_from=datetime(2026, 11, 15, tzinfo=UTC),
    )
    send(contract, 1, at(2026, 11, 3), tokens_in=80)
    send(contract, 1, at(2026, 11, 20), tokens_in=50)

    invoice = generate_invoice(contract.pk, *NOV, now=DEC_2)

    [line] = invoice.lines.filter(kind="usage")
    assert (line.quantity, line.unit_price, line.amount) == (D(80), D("0.20"), D("16.00"))  # 80 × 0.20
    assert invoice.status == Invoice.Status.FINALIZED


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("tokens_in + latest(tokens_in)", "latest() is an aggregation: it wraps the whole metric"),
        ("period_max(tokens_in) * 2", "an aggregation, period_max(…), wraps the whole metric"),
        ("period_max(tokens_in", "Expected ')'"),
        ("max(tokens_in)", "max() takes 2 arguments, not 1"),
    ],
)
def test_a_misplaced_aggregation_is_refused_at_its_position(expression: str, message: str) -> None:
    with pytest.raises(TermsError) as raised:
        parse_metric(expression)
    assert raised.value.code == "invalid_expression" and message in raised.value.message


def test_an_outcome_rule_has_no_aggregation() -> None:
    with pytest.raises(TermsError, match="an outcome rule has none"):
        parse_metric("latest(outcome_f1) >= 0.9", rule=True)


def test_the_metric_api_says_the_aggregation() -> None:
    contract = ContractFactory.create()
    client = Client()
    client.force_login(get_user_model().objects.create_user("ops", is_staff=True))

    response = client.put(
        f"/v1/contracts/{contract.code}/metrics/peak_in",
        {"name": "Peak input", "expression": "period_max(tokens_in)"},
        content_type="application/json",
    )
    refused = client.put(
        f"/v1/contracts/{contract.code}/metrics/bad",
        {"name": "Bad", "expression": "tokens_in + unique_count(hops)"},
        content_type="application/json",
    )

    assert response.status_code == 200 and response.json()["aggregation"] == "period_max"
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_expression"
