"""Whole-period scenarios (like Lago's spec/scenarios): real records through ingest, real ClickHouse
and PostgreSQL, the clock pinned by passing `now`; every amount is exact."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from billing.models import CreditEntry, Invoice, LateUsage
from billing.selectors import credit_balance
from billing.services import add_coupon, generate_invoice, grant_credits
from billing.settlement import issue_note
from common.periods import month_bounds
from contracts.models import Contract, ContractMetric, ContractPrice
from pricing.errors import BillingError
from tests.billing.usage import at, send
from tests.factories import ContractFactory

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]
D = Decimal
NOV = month_bounds("2026-11")
OCT = month_bounds("2026-10")
DEC = month_bounds("2026-12")
NOV_2 = datetime(2026, 11, 2, tzinfo=UTC)
DEC_2 = datetime(2026, 12, 2, tzinfo=UTC)
JAN_2 = datetime(2027, 1, 2, tzinfo=UTC)


def contract(**terms: Any) -> Contract:
    return ContractFactory.create(**terms)


def price(c: Contract, dimension: str, model: str = "per_unit", **fields: Any) -> None:
    ContractPrice.objects.create(contract=c, dimension=dimension, charge_model=model, **fields)


def lines(invoice: Invoice) -> list[tuple[str, str, Decimal, Decimal]]:
    return [(x.kind, x.dimension, x.quantity, x.amount) for x in invoice.lines.all()]


def test_base_fee_quota_and_overage() -> None:
    c = contract(base_fee=D("100"))
    price(c, "requests", unit_price=D("0.50"), included_quantity=5)
    price(c, "tokens_in", unit_price=D("0.0001"), included_quantity=1000)  # 800 used: all inside the quota
    send(c, 8, at(2026, 11, 3))

    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)

    assert lines(invoice) == [
        ("usage", "requests", D(8), D("1.50")),  # (8 - 5) × 0.50
        ("usage", "tokens_in", D(800), D("0.00")),
        ("base_fee", "", D(1), D("100.00")),
    ]
    assert (invoice.subtotal, invoice.tax, invoice.total, invoice.amount_due) == (
        D("101.50"),
        D("0.00"),
        D("101.50"),
        D("101.50"),
    )
    assert invoice.status == "finalized" and invoice.number == "TREEMETER-000001"


@pytest.mark.parametrize(
    ("records", "graduated", "volume"),
    [(10, "10.00", "10.00"), (11, "10.50", "5.50"), (20, "15.00", "10.00"), (21, "15.10", "2.10")],
)
def test_graduated_versus_volume_at_the_tier_edges(records: int, graduated: str, volume: str) -> None:
    tiers = {
        "tiers": [
            {"up_to": 1000, "unit_price": "0.01"},
            {"up_to": 2000, "unit_price": "0.005"},
            {"unit_price": "0.001"},
        ]
    }
    amounts = []
    for model in ("graduated", "volume"):
        c = contract()
        price(c, "tokens_in", model, properties=tiers)
        send(c, records, at(2026, 11, 9))  # 100 input tokens each
        amounts.append(generate_invoice(c.pk, *NOV, now=DEC_2).total)
    assert amounts == [D(graduated), D(volume)]


def test_minimum_commitment_true_up_and_its_proration_for_a_mid_month_start() -> None:
    whole = contract(minimum_commitment=D("50"))
    price(whole, "requests", unit_price=D("0.50"))
    send(whole, 3, at(2026, 11, 20))
    late_start = contract(minimum_commitment=D("50"), starts_at=datetime(2026, 11, 16, tzinfo=UTC))
    price(late_start, "requests", unit_price=D("0.50"))
    send(late_start, 3, at(2026, 11, 20))

    first = generate_invoice(whole.pk, *NOV, now=DEC_2)
    second = generate_invoice(late_start.pk, *NOV, now=DEC_2)

    assert lines(first)[-1] == ("commitment", "", D(1), D("48.50"))  # 50 − 3 × 0.50
    assert first.total == D("50.00")
    assert lines(second)[-1] == ("commitment", "", D(1), D("23.50"))  # 15 of 30 days: 25 − 1.50
    assert second.total == D("25.00")


def test_prepaid_credits_pay_part_of_an_invoice_and_the_wallet_is_a_ledger() -> None:
    c = contract(base_fee=D("100"))
    price(c, "requests", unit_price=D("0.50"))
    send(c, 3, at(2026, 11, 4))
    grant_credits(c, D("30.00"), reference="po-17")
    grant_credits(c, D("30.00"), reference="po-17")  # a retried grant: one entry

    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)

    assert (invoice.total, invoice.credits_applied, invoice.amount_due) == (
        D("101.50"),
        D("30.00"),
        D("71.50"),
    )
    assert credit_balance(c.pk) == D("0.00")
    assert list(CreditEntry.objects.filter(contract=c).values_list("kind", "amount")) == [
        ("grant", D("30.00")),
        ("consume", D("-30.00")),
    ]
    with pytest.raises(ValueError, match="append-only"):
        CreditEntry.objects.get(kind="grant", contract=c).delete()


def test_credits_pay_only_the_line_kinds_the_contract_allows_with_their_tax() -> None:
    c = contract(base_fee=D("100"), credit_order=["usage"], tax_rate=D("0.06"))
    price(c, "requests", unit_price=D("0.50"))
    send(c, 3, at(2026, 11, 4))
    grant_credits(c, D("30.00"), reference="grant-1")

    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)

    assert (invoice.subtotal, invoice.tax, invoice.total) == (D("101.50"), D("6.09"), D("107.59"))
    assert invoice.credits_applied == D(
        "1.59"
    )  # usage 1.50 + 6 % tax; the base fee is not payable by credits
    assert invoice.amount_due == D("106.00")
    assert credit_balance(c.pk) == D("28.41")
    assert invoice.terms["credit_allocation"] == {"usage": "1.59"}


def test_an_outcome_revoked_after_billing_becomes_a_credit_note() -> None:
    c = contract()
    price(c, "requests", unit_price=D("1000"))
    price(c, "outcomes", unit_price=D("2000"))
    send(c, 2, at(2026, 11, 7), outcome={"type": "matched_patient", "value": "2000.00", "verified": True})
    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)
    line = invoice.lines.get(dimension="outcomes")
    assert (invoice.total, line.amount) == (D("6000.00"), D("4000.00"))

    note = issue_note(invoice, "credit", D("2000.00"), "outcome case-1 revoked by the customer", line=line)

    assert (note.number, note.amount, note.line_id) == (f"{invoice.number}-CN1", D("2000.00"), line.pk)
    with pytest.raises(BillingError) as raised:
        issue_note(invoice, "credit", D("2000.01"), "more than the line has left", line=line)
    assert raised.value.code == "note_exceeds_line"
    with pytest.raises(BillingError) as raised:
        issue_note(invoice, "credit", D("4000.01"), "more than the invoice has left")
    assert raised.value.code == "note_exceeds_invoice"
    assert issue_note(invoice, "debit", D("10.00"), "courier fee").number == f"{invoice.number}-DN1"


def test_late_records_after_finalisation_are_billed_on_the_next_invoice() -> None:
    c = contract()
    price(c, "requests", unit_price=D("0.50"))
    send(c, 4, at(2026, 10, 10))
    october = generate_invoice(c.pk, *OCT, now=NOV_2)
    assert october.total == D("2.00")

    send(c, 3, at(2026, 10, 29))  # late: October's invoice is final
    send(c, 1, at(2026, 11, 5))
    november = generate_invoice(c.pk, *NOV, now=DEC_2)

    october.refresh_from_db()
    assert october.total == D("2.00") and october.status == "finalized"
    assert lines(november) == [
        ("usage", "requests", D(1), D("0.50")),
        ("adjustment", "requests", D(3), D("1.50")),
    ]
    assert november.lines.get(kind="adjustment").description.startswith("Late usage 2026-10 (TREEMETER-")
    assert list(LateUsage.objects.values_list("invoice", "quantity", "decision", "amount")) == [
        (october.pk, D(3), "adjusted", D("1.50"))
    ]
    again = generate_invoice(c.pk, *DEC, now=JAN_2)
    assert lines(again) == [("usage", "requests", D(0), D("0.00"))]  # adjusted once only


def test_late_records_past_the_policy_window_are_reported_not_billed() -> None:
    c = contract(late_usage_policy="ignore_after", late_usage_days=10)
    price(c, "requests", unit_price=D("0.50"))
    send(c, 4, at(2026, 10, 10))
    generate_invoice(c.pk, *OCT, now=NOV_2)
    send(c, 3, at(2026, 10, 29))

    november = generate_invoice(c.pk, *NOV, now=DEC_2)  # 30 days after October was finalised

    assert lines(november) == [("usage", "requests", D(0), D("0.00"))]
    assert list(LateUsage.objects.values_list("quantity", "decision", "amount")) == [
        (D(3), "ignored", D("1.50"))
    ]


def test_a_mid_period_contract_change_prorates_each_contract() -> None:
    old = contract(base_fee=D("100"), ends_at=datetime(2026, 11, 16, tzinfo=UTC))
    price(old, "requests", unit_price=D("0.50"))
    new = contract(base_fee=D("200"), starts_at=datetime(2026, 11, 16, tzinfo=UTC), tenant=old.tenant)
    price(new, "requests", unit_price=D("0.40"))
    send(old, 10, at(2026, 11, 5))
    send(new, 10, at(2026, 11, 20))

    first = generate_invoice(old.pk, *NOV, now=DEC_2)
    second = generate_invoice(new.pk, *NOV, now=DEC_2)

    assert lines(first) == [("usage", "requests", D(10), D("5.00")), ("base_fee", "", D("0.5"), D("50.00"))]
    assert lines(second) == [("usage", "requests", D(10), D("4.00")), ("base_fee", "", D("0.5"), D("100.00"))]


def test_a_coupon_discounts_for_its_periods_only() -> None:
    c = contract(base_fee=D("100"))
    price(c, "requests", unit_price=D("0.50"))
    add_coupon(c, "WELCOME10", percent_off=D("0.10"), periods=1)
    add_coupon(c, "FIFTY", amount_off=D("50"))
    send(c, 3, at(2026, 10, 4))

    october = generate_invoice(c.pk, *OCT, now=NOV_2)
    november = generate_invoice(c.pk, *NOV, now=DEC_2)

    assert [(x.kind, x.amount) for x in october.lines.all()][-2:] == [
        ("discount", D("-10.15")),  # 10 % of 101.50, half up
        ("discount", D("-50.00")),
    ]
    assert october.total == D("41.35")
    assert [(x.kind, x.amount) for x in november.lines.all()] == [
        ("usage", D("0.00")),
        ("base_fee", D("100.00")),
        ("discount", D("-50.00")),
    ]


def test_cny_and_jpy_round_to_their_minor_units_with_inclusive_and_exclusive_tax() -> None:
    cny = contract(tax_rate=D("0.06"))
    price(cny, "tokens_in", unit_price=D("0.000123"))
    jpy = contract(currency="JPY", tax_rate=D("0.10"), tax_inclusive=True)
    price(jpy, "tokens_in", unit_price=D("0.0333"))
    for c in (cny, jpy):
        send(c, 37, at(2026, 11, 12))  # 3,700 tokens

    a = generate_invoice(cny.pk, *NOV, now=DEC_2)
    b = generate_invoice(jpy.pk, *NOV, now=DEC_2)

    assert (a.subtotal, a.tax, a.total, a.currency) == (
        D("0.46"),
        D("0.03"),
        D("0.49"),
        "CNY",
    )  # 0.4551; 0.0276
    assert (b.subtotal, b.tax, b.total, b.currency) == (
        D("123"),
        D("11"),
        D("123"),
        "JPY",
    )  # 123.21; 123/11=11.18


def test_a_custom_metric_prices_seed_000_s_expert_hop_cache_weighting() -> None:
    c = contract()
    ContractMetric.objects.create(
        contract=c,
        code="weighted_experts",
        name="Weighted experts",
        expression="distinct_experts * hops * (1 - cache_hit_ratio)",
    )
    price(c, "weighted_experts", unit_price=D("0.10"))
    send(c, 4, at(2026, 11, 2))  # 3 experts × 5 hops × (1 − 2/3) = 5 per record
    send(c, 2, at(2026, 11, 2), expert_cache_hits=0, expert_cache_misses=0)  # ratio 0 → 15 each

    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)

    assert lines(invoice) == [("usage", "weighted_experts", D(50), D("5.00"))]
    assert invoice.lines.get().description == "Weighted experts"
