"""A price change within one contract: "from 15 November, output tokens cost 0.00002 instead of
0.00003". Real records through ingest, real ClickHouse and PostgreSQL, the clock pinned by passing
`now` (as in test_scenarios.py); every amount is exact and computed by hand in the comments."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.test import Client

from billing.models import Invoice
from billing.rating import PeriodUsage, SegmentUsage, rate_versions
from billing.services import generate_invoice
from billing.terms import ChargeTerms, Terms
from common.periods import month_bounds
from contracts.models import Contract, ContractPrice
from tests.billing.usage import at, send
from tests.factories import ContractFactory

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]
D = Decimal
NOV = month_bounds("2026-11")
DEC_2 = datetime(2026, 12, 2, tzinfo=UTC)
CHANGE = datetime(2026, 11, 15, tzinfo=UTC)


def price(c: Contract, dimension: str, model: str = "per_unit", **fields: Any) -> None:
    ContractPrice.objects.create(contract=c, dimension=dimension, charge_model=model, **fields)


def lines(invoice: Invoice) -> list[tuple[str, Decimal, Decimal, Decimal]]:
    return [(x.dimension, x.quantity, x.unit_price, x.amount) for x in invoice.lines.all()]


def test_a_per_unit_change_mid_month_bills_each_segment_at_its_price() -> None:
    c = ContractFactory.create()
    price(c, "requests", unit_price=D("0.01"))
    price(c, "tokens_out", unit_price=D("0.00003"))
    price(c, "tokens_out", unit_price=D("0.00002"), effective_from=CHANGE)
    send(c, 10, at(2026, 11, 3), tokens_out=100_000)  # 1,000,000 tokens before the change
    send(c, 1, at(2026, 11, 15), tokens_out=50_000)  # at the change instant: the new price
    send(c, 5, at(2026, 11, 20), tokens_out=200_000)  # 1,000,000 more after it

    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)

    assert lines(invoice) == [
        ("requests", D(16), D("0.01"), D("0.16")),  # unchanged price: one line, 16 × 0.01
        ("tokens_out", D(1_000_000), D("0.00003"), D("30.00")),  # 1,000,000 × 0.00003
        ("tokens_out", D(1_050_000), D("0.00002"), D("21.00")),  # 1,050,000 × 0.00002
    ]
    assert invoice.total == D("51.16")
    old, new = invoice.lines.filter(dimension="tokens_out")
    assert old.description == "Output tokens (2026-11-01 00:00 – 2026-11-15 00:00 UTC)"
    assert new.description == "Output tokens (2026-11-15 00:00 – 2026-12-01 00:00 UTC)"
    assert (old.details["segment_start"], old.details["segment_end"], old.details["effective_from"]) == (
        "2026-11-01T00:00:00+00:00",
        "2026-11-15T00:00:00+00:00",
        "",
    )
    assert new.details["effective_from"] == "2026-11-15T00:00:00+00:00"
    assert invoice.terms["quantities"]["tokens_out"] == "2050000"
    assert [s["quantities"]["tokens_out"] for s in invoice.terms["segments"]] == ["1000000", "1050000"]


@pytest.mark.parametrize(
    ("included_before", "included_after", "amounts"),
    [
        # The newest allowance (1,500,000) is the period's, consumed in time order: the first
        # 1,000,000 are free; of the second 1,000,000, 500,000 are free and 500,000 × 0.00002 = 10.00.
        ("500000", "1500000", [D("0.00"), D("10.00")]),
        # The allowance shrinks to 500,000: 500,000 of the first segment are free, the other
        # 500,000 × 0.00003 = 15.00; the second segment is all billable: 1,000,000 × 0.00002 = 20.00.
        ("1500000", "500000", [D("15.00"), D("20.00")]),
    ],
)
def test_the_included_quantity_is_consumed_in_time_order_across_the_change(
    included_before: str, included_after: str, amounts: list[Decimal]
) -> None:
    c = ContractFactory.create()
    price(c, "tokens_out", unit_price=D("0.00003"), included_quantity=D(included_before))
    price(
        c, "tokens_out", unit_price=D("0.00002"), included_quantity=D(included_after), effective_from=CHANGE
    )
    send(c, 10, at(2026, 11, 3), tokens_out=100_000)
    send(c, 10, at(2026, 11, 20), tokens_out=100_000)

    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)

    assert [x.amount for x in invoice.lines.all()] == amounts
    assert invoice.total == sum(amounts)
    old, new = invoice.lines.all()
    assert D(old.details["included"]) + D(new.details["included"]) == min(D(included_after), D(2_000_000))


def test_graduated_tiers_continue_across_the_change_and_the_maximum_bounds_the_total() -> None:
    c = ContractFactory.create()
    before = {"tiers": [{"up_to": 1_000_000, "unit_price": "0.00003"}, {"unit_price": "0.00001"}]}
    after = {
        "tiers": [{"up_to": 1_000_000, "unit_price": "0.00002"}, {"unit_price": "0.000005"}],
        "maximum": "25",
    }
    price(c, "tokens_out", "graduated", properties=before)
    price(c, "tokens_out", "graduated", properties=after, effective_from=CHANGE)
    send(c, 6, at(2026, 11, 3), tokens_out=100_000)  # 600,000
    send(c, 10, at(2026, 11, 20), tokens_out=100_000)  # 1,000,000

    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)

    assert lines(invoice) == [
        # tier positions 0–600,000 on the old ladder: 600,000 × 0.00003 = 18.00
        ("tokens_out", D(600_000), D("0.00003"), D("18.00")),
        # positions 600,000–1,600,000 on the new ladder (not from 0 again, which would be 20.00):
        # 400,000 × 0.00002 + 600,000 × 0.000005 = 8.00 + 3.00 = 11.00, 0.000011 per token
        ("tokens_out", D(1_000_000), D("0.000011"), D("11.00")),
        # the newest version's period maximum on the dimension's total: 25 − (18 + 11) = −4.00
        ("tokens_out", D(0), D(0), D("-4.00")),
    ]
    assert invoice.total == D("25.00")
    assert invoice.lines.all()[1].details["tier_position"] == "600000"


def test_the_finalised_invoice_keeps_both_versions_whatever_is_edited_later() -> None:
    c = ContractFactory.create()
    price(c, "tokens_out", unit_price=D("0.00003"))
    price(c, "tokens_out", unit_price=D("0.00002"), effective_from=CHANGE)
    send(c, 10, at(2026, 11, 3), tokens_out=100_000)
    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)
    assert invoice.status == "finalized"

    charges = [x for x in invoice.terms["charges"] if x["dimension"] == "tokens_out"]
    assert [(x["effective_from"], x["properties"]) for x in charges] == [
        ("", {"unit_price": "0.00003"}),
        ("2026-11-15T00:00:00+00:00", {"unit_price": "0.00002"}),
    ]
    assert [x.effective_from for x in Terms.from_json(invoice.terms).charges] == [
        "",
        "2026-11-15T00:00:00+00:00",
    ]
    ContractPrice.objects.filter(contract=c).update(unit_price=D("9"))
    again = generate_invoice(c.pk, *NOV, now=DEC_2)
    assert again.pk == invoice.pk and again.terms["charges"] == invoice.terms["charges"]
    assert [x.amount for x in again.lines.all()] == [D("30.00"), D("0.00")]


def test_a_version_starting_in_a_later_period_leaves_this_one_whole() -> None:
    c = ContractFactory.create()
    price(c, "tokens_out", unit_price=D("0.00003"))
    price(c, "tokens_out", unit_price=D("0.00002"), effective_from=datetime(2026, 12, 1, tzinfo=UTC))
    send(c, 10, at(2026, 11, 3), tokens_out=100_000)

    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)

    assert lines(invoice) == [("tokens_out", D(1_000_000), D("0.00003"), D("30.00"))]
    assert [x["effective_from"] for x in invoice.terms["charges"]] == [""]
    assert "segments" not in invoice.terms


def segmented(before: int, after: int) -> PeriodUsage:
    """1–15 November and 15 November–1 December usage of tokens_out (pure rating, no records)."""
    halves = (
        SegmentUsage(NOV[0], CHANGE, {"tokens_out": D(before)}),
        SegmentUsage(CHANGE, NOV[1], {"tokens_out": D(after)}),
    )
    return PeriodUsage(0, {"tokens_out": D(before + after)}, segments=halves)


def versions(model: str, before: dict[str, Any], after: dict[str, Any]) -> list[ChargeTerms]:
    return [
        ChargeTerms("tokens_out", "Output tokens", model, before),
        ChargeTerms("tokens_out", "Output tokens", model, after, effective_from=CHANGE.isoformat()),
    ]


@pytest.mark.django_db(databases=[])
def test_volume_tiers_take_the_tier_of_the_period_total() -> None:
    before = {"tiers": [{"up_to": 1000, "unit_price": "0.01"}, {"unit_price": "0.005", "flat_fee": "3"}]}
    after = {"tiers": [{"up_to": 1000, "unit_price": "0.02"}, {"unit_price": "0.004", "flat_fee": "6"}]}

    rated = rate_versions(versions("volume", before, after), segmented(500, 1000), *NOV, "CNY")

    # The total 1,500 falls in tier 2 of both ladders; each tier's flat fee by the segment's share:
    # 500 × 0.005 + 3 × 500/1500 = 2.50 + 1.00 = 3.50; 1000 × 0.004 + 6 × 1000/1500 = 4.00 + 4.00 = 8.00
    assert [(x.quantity, x.amount) for x in rated] == [(D(500), D("3.50")), (D(1000), D("8.00"))]


@pytest.mark.django_db(databases=[])
def test_the_newest_minimum_tops_up_the_dimension_total() -> None:
    after = {"unit_price": "0.02", "minimum": "50"}

    rated = rate_versions(
        versions("per_unit", {"unit_price": "0.01"}, after), segmented(1000, 1000), *NOV, "CNY"
    )

    # 1000 × 0.01 = 10.00 and 1000 × 0.02 = 20.00: 30.00 rated, topped up by 20.00 to the minimum 50
    assert [(x.quantity, x.amount, x.details.get("bound")) for x in rated] == [
        (D(1000), D("10.00"), None),
        (D(1000), D("20.00"), None),
        (D(0), D("20.00"), "minimum"),
    ]
    assert rated[2].description == "Output tokens: period minimum 50 (30.00 rated)"


@pytest.mark.django_db(databases=[])
def test_usage_not_measured_per_segment_is_refused() -> None:
    unsplit = PeriodUsage(0, {"tokens_out": D(10)})
    with pytest.raises(ValueError, match="not measured per price segment"):
        rate_versions(versions("per_unit", {"unit_price": "1"}, {"unit_price": "2"}), unsplit, *NOV, "CNY")


@pytest.fixture
def staff(client: Client) -> Client:
    client.force_login(get_user_model().objects.create_user("ops", is_staff=True))
    return client


def put(client: Client, contract: Contract, dimension: str, body: dict[str, Any]) -> Any:
    return client.put(
        f"/v1/contracts/{contract.code}/charges/{dimension}",
        data=json.dumps(body),
        content_type="application/json",
    )


def test_the_api_adds_a_version_and_refuses_bad_instants(staff: Client) -> None:
    c = ContractFactory.create()  # starts 2026-01-01
    assert put(staff, c, "tokens_out", {"unit_price": "0.00003"}).status_code == 200
    body = {"unit_price": "0.00002", "effective_from": "2026-11-15T00:00:00Z"}
    for _ in range(2):  # the same version again changes nothing
        response = put(staff, c, "tokens_out", body)
        assert response.status_code == 200, response.content
    assert response.json()["effective_from"] == "2026-11-15T00:00:00+00:00"
    assert list(c.prices.values_list("effective_from", "unit_price")) == [
        (None, D("0.00003")),
        (CHANGE, D("0.00002")),
    ]

    refusals = [
        ({"unit_price": "0.00001", "effective_from": "2026-11-15T00:00:00Z"}, 409, "price_version_exists"),
        (
            {"unit_price": "0.00001", "effective_from": "2025-12-31T00:00:00Z"},
            400,
            "effective_before_contract_start",
        ),
    ]
    for request, status, code in refusals:
        response = put(staff, c, "tokens_out", request)
        assert (response.status_code, response.json()["code"]) == (status, code)
    response = put(staff, c, "outcomes", {"unit_price": "5", "effective_from": "2026-11-15T00:00:00Z"})
    assert (response.status_code, response.json()["code"]) == (400, "outcome_price_mid_period")

    generate_invoice(c.pk, *NOV, now=DEC_2)  # finalises November
    response = put(
        staff, c, "tokens_out", {"unit_price": "0.00001", "effective_from": "2026-11-20T00:00:00Z"}
    )
    assert (response.status_code, response.json()["code"]) == (409, "period_finalised")
    assert response.json()["details"]["finalised_until"] == "2026-12-01T00:00:00+00:00"
    response = put(
        staff, c, "tokens_out", {"unit_price": "0.00001", "effective_from": "2026-12-05T00:00:00Z"}
    )
    assert response.status_code == 200, response.content
    assert c.prices.count() == 3


def test_the_admin_form_gets_the_same_checks() -> None:
    c = ContractFactory.create()
    early = ContractPrice(
        contract=c, dimension="tokens_out", unit_price=D(1), effective_from=datetime(2025, 6, 1, tzinfo=UTC)
    )
    with pytest.raises(ValidationError, match="effective_before_contract_start"):
        early.full_clean()
    at_start = ContractPrice(contract=c, dimension="tokens_out", unit_price=D(1), effective_from=c.starts_at)
    at_start.full_clean()  # the contract start is the initial version's instant
    assert at_start.effective_from is None
