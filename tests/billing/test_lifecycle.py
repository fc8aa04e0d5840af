"""Invoice lifecycle: grace, finalisation, gapless numbers, immutability, paid/void, invoice runs."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing.models import CreditEntry, Invoice
from billing.selectors import credit_balance
from billing.services import finalize_invoice, generate_invoice, grant_credits, void_invoice
from billing.settlement import mark_paid
from billing.tasks import run_invoices, run_invoices_task
from common.periods import month_bounds
from contracts.models import Contract, ContractMetric, ContractPrice
from pricing.errors import BillingError
from tests.billing.concurrency import at_once
from tests.billing.usage import at, send
from tests.factories import ContractFactory

pytestmark = pytest.mark.usefixtures("clickhouse")
D = Decimal
NOV = month_bounds("2026-11")
DEC_2 = datetime(2026, 12, 2, tzinfo=UTC)


def priced(**terms: Any) -> Contract:
    contract = ContractFactory.create(**terms)
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=D("0.50"))
    return contract


@pytest.mark.django_db
def test_a_grace_period_keeps_the_invoice_open_for_late_records_then_finalises_it() -> None:
    c = priced(grace_days=3)
    send(c, 2, at(2026, 11, 10))

    first = generate_invoice(c.pk, *NOV, now=DEC_2)
    assert (first.status, first.number, first.total) == ("grace", None, D("1.00"))
    send(c, 1, at(2026, 11, 30))  # late, but inside the grace period
    second = generate_invoice(c.pk, *NOV, now=datetime(2026, 12, 3, tzinfo=UTC))
    assert (second.pk, second.status, second.total) == (first.pk, "grace", D("1.50"))

    final = generate_invoice(c.pk, *NOV, now=datetime(2026, 12, 4, tzinfo=UTC))
    assert (final.pk, final.status, final.total) == (first.pk, "finalized", D("1.50"))
    assert final.number == "TREEMETER-000001" and final.finalized_at == datetime(2026, 12, 4, tzinfo=UTC)


@pytest.mark.django_db
def test_a_finalised_invoice_keeps_its_terms_when_the_contract_changes() -> None:
    c = priced()
    send(c, 4, at(2026, 11, 10))
    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)
    ContractPrice.objects.filter(contract=c).update(unit_price=D("9"))
    Contract.objects.filter(pk=c.pk).update(base_fee=D("1000"))

    again = generate_invoice(c.pk, *NOV, now=DEC_2)

    assert (again.pk, again.total) == (invoice.pk, D("2.00"))
    assert again.terms["charges"][0]["properties"] == {"unit_price": "0.5"}
    assert again.terms["base_fee"] == "0"
    with pytest.raises(ValueError, match="cannot be changed"):
        again.total = D("1")
        again.save()


@pytest.mark.django_db
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    new_price=st.decimals(min_value=0, max_value=1000, places=4),
    new_fee=st.decimals(min_value=0, max_value=10_000, places=2),
    extra_tax=st.decimals(min_value=0, max_value="0.25", places=2),
)
def test_rerunning_a_closed_period_never_changes_a_finalised_invoice(
    new_price: Decimal, new_fee: Decimal, extra_tax: Decimal
) -> None:
    c = priced(base_fee=D("10"))
    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)
    before = (invoice.total, invoice.number, [(x.amount, x.unit_price) for x in invoice.lines.all()])
    ContractPrice.objects.filter(contract=c).update(unit_price=new_price)
    Contract.objects.filter(pk=c.pk).update(base_fee=new_fee, tax_rate=extra_tax)

    after = generate_invoice(c.pk, *NOV, now=datetime(2027, 3, 1, tzinfo=UTC))

    assert (after.total, after.number, [(x.amount, x.unit_price) for x in after.lines.all()]) == before


@pytest.mark.django_db
def test_numbers_are_sequential_per_issuing_entity() -> None:
    contracts = [priced() for _ in range(3)] + [priced(issuing_entity="treemeter-hk")]
    numbers = [generate_invoice(c.pk, *NOV, now=DEC_2).number for c in contracts]
    assert numbers == ["TREEMETER-000001", "TREEMETER-000002", "TREEMETER-000003", "TREEMETER-HK-000001"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_invoice_runs_make_one_invoice_each_with_gapless_numbers() -> None:
    contracts = [priced() for _ in range(6)]
    for c in contracts[:3]:
        send(c, 2, at(2026, 11, 3))
    at_once(lambda: run_invoices("2026-11"), threads=3)
    invoices = Invoice.objects.filter(contract__in=contracts)
    assert invoices.count() == 6
    assert sorted(str(n) for n in invoices.values_list("number", flat=True)) == [
        f"TREEMETER-{n:06d}" for n in range(1, 7)
    ]
    assert sorted(invoices.values_list("total", flat=True)) == [D("0.00")] * 3 + [D("1.00")] * 3


@pytest.mark.django_db
def test_the_invoice_run_reports_progress_and_is_idempotent() -> None:
    contracts = [priced() for _ in range(3)]
    ended = priced(ends_at=datetime(2026, 10, 1, tzinfo=UTC))  # not running in November
    send(contracts[0], 5, at(2026, 11, 3))
    seen: list[tuple[int, int]] = []

    assert run_invoices("2026-11", lambda done, total: seen.append((done, total))) == {
        "contracts": 3,
        "finalized": 3,
        "failed": {},
    }
    assert seen == [(1, 3), (2, 3), (3, 3)]
    assert run_invoices_task.delay("2026-11").get() == {"contracts": 3, "finalized": 3, "failed": {}}
    assert Invoice.objects.count() == 3 and not Invoice.objects.filter(contract=ended).exists()
    assert Invoice.objects.get(contract=contracts[0]).total == D("2.50")


@pytest.mark.django_db
def test_paid_and_void_transitions() -> None:
    c = priced(base_fee=D("20"))
    grant_credits(c, D("5.00"), reference="g1")
    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)
    assert (invoice.credits_applied, invoice.amount_due) == (D("5.00"), D("15.00"))

    voided = void_invoice(invoice)
    assert voided.status == "void" and voided.number == invoice.number
    assert credit_balance(c.pk) == D("5.00")  # the consumed credits went back to the wallet
    with pytest.raises(BillingError) as raised:
        mark_paid(voided)
    assert raised.value.code == "invalid_transition"

    other = priced()
    paid = mark_paid(generate_invoice(other.pk, *NOV, now=DEC_2), paid_at=DEC_2)
    assert (paid.status, paid.paid_at) == ("paid", DEC_2)
    assert mark_paid(paid).paid_at == DEC_2  # paying twice is a no-op
    assert finalize_invoice(paid).status == "paid"
    assert list(CreditEntry.objects.filter(contract=c).values_list("reference", "amount")) == [
        ("g1", D("5.00")),
        (f"invoice:{invoice.pk}", D("-5.00")),
        (f"void:{invoice.pk}", D("5.00")),
    ]


@pytest.mark.django_db
def test_credits_must_be_positive_minor_units() -> None:
    c = priced(currency="JPY")
    for amount in (D("-1"), D("0"), D("1.5")):
        with pytest.raises(BillingError) as raised:
            grant_credits(c, amount, reference=f"bad-{amount}")
        assert (raised.value.code, raised.value.http_status) == ("invalid_amount", 400)


@pytest.mark.django_db
def test_the_terminal_invoice_shows_tax_credits_and_the_number(capsys: pytest.CaptureFixture[str]) -> None:
    from django.core.management import call_command

    c = priced(base_fee=D("100"), tax_rate=D("0.06"))
    grant_credits(c, D("50.00"), reference="g")
    invoice = generate_invoice(c.pk, *NOV, now=DEC_2)
    call_command("print_invoice", str(invoice.pk))
    out = capsys.readouterr().out
    for text in (
        "TREEMETER-000001",
        "Subtotal",
        "100.00",
        "Tax",
        "6.00",
        "Prepaid credits",
        "-50.00",
        "56.00",
    ):
        assert text in out


@pytest.mark.django_db
def test_a_contract_with_unbillable_terms_is_reported_and_the_run_goes_on() -> None:
    good = priced()
    broken = priced()
    ContractPrice.objects.create(
        contract=broken,
        dimension="tokens_in",
        charge_model="volume",
        properties={"tiers": [{"up_to": 5, "unit_price": 1}]},
    )  # no unbounded tier
    ContractMetric.objects.create(contract=ContractFactory.create(), code="bad", name="Bad", expression="1 +")

    result = run_invoices("2026-11")

    assert result["contracts"] == 3 and result["finalized"] == 1
    assert result["failed"][broken.code].startswith("unbounded_last_tier: ")
    assert len(result["failed"]) == 2  # the contract with the broken metric too
    assert Invoice.objects.get(contract=good).number == "TREEMETER-000001"


@pytest.mark.django_db
def test_the_run_invoices_command(capsys: pytest.CaptureFixture[str]) -> None:
    from django.core.management import CommandError, call_command

    priced()
    call_command("run_invoices", "2026-11")
    assert "1 contracts, 1 invoices finalised" in capsys.readouterr().out
    with pytest.raises(CommandError, match="not a month"):
        call_command("run_invoices", "November")
    broken = priced()
    ContractPrice.objects.create(contract=broken, dimension="gpu_hours", unit_price=D(1))
    with pytest.raises(CommandError, match="1 contracts could not be invoiced"):
        call_command("run_invoices", "2026-11")
    assert f"{broken.code}: unknown_dimension" in capsys.readouterr().out


@pytest.mark.django_db(transaction=True)
def test_concurrent_finalisations_never_spend_the_wallet_twice() -> None:
    c = priced(base_fee=D("25"), grace_days=3)
    grant_credits(c, D("30.00"), reference="g")
    drafts = [
        generate_invoice(c.pk, *month_bounds("2026-10"), now=datetime(2026, 11, 2, tzinfo=UTC)),
        generate_invoice(c.pk, *NOV, now=DEC_2),
    ]
    assert [d.status for d in drafts] == ["grace", "grace"]
    each = iter(drafts)
    at_once(lambda: finalize_invoice(next(each)), threads=2)  # one draft per thread

    applied = sorted(Invoice.objects.filter(contract=c).values_list("credits_applied", flat=True))
    assert applied == [D("5.00"), D("25.00")]
    assert credit_balance(c.pk) == D("0.00")
