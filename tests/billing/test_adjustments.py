"""Billing's port for what it takes from outside (billing.adjustments): a registered pause source and
credit source, called by rating and the invoice run; with none registered, no pauses and no credits."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User

from billing.adjustments import BillingPause, InvoiceCredit, Sources, sources_replaced
from billing.models import Invoice, InvoiceLine
from billing.services import generate_invoice, void_invoice
from billing.tasks import run_invoices
from common.periods import month_bounds
from contracts.models import Contract, ContractPrice
from sla.models import Exclusion
from sla.services import declare_exclusion
from tests.billing.usage import at, send
from tests.factories import ContractFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
NOV = month_bounds("2026-11")
AFTER_NOV = datetime(2026, 12, 2, tzinfo=UTC)


class Credits:
    """A credit source that remembers what billing told it."""

    def __init__(self, *due: InvoiceCredit) -> None:
        self.due = list(due)
        self.asked: list[tuple[int, int | None, datetime]] = []
        self.recorded: list[tuple[int, list[tuple[int, int]], list[tuple[int, str]]]] = []
        self.released: list[int] = []

    def pending(
        self, contract_id: int, invoice: Invoice | None, period_start: datetime
    ) -> list[InvoiceCredit]:
        self.asked.append((contract_id, None if invoice is None else invoice.pk, period_start))
        return list(self.due)

    def contracts_with_pending(
        self, contract_ids: Sequence[int], invoice_ids: Sequence[int], period_start: datetime
    ) -> set[int]:
        return set(contract_ids) if self.due else set()

    def record(
        self,
        invoice: Invoice,
        applied: Sequence[tuple[InvoiceCredit, InvoiceLine]],
        held: Sequence[tuple[InvoiceCredit, str]],
        now: datetime,
    ) -> None:
        self.recorded.append(
            (invoice.pk, [(c.reference, line.pk) for c, line in applied], [(c.reference, r) for c, r in held])
        )

    def release(self, invoice: Invoice) -> int:
        self.released.append(invoice.pk)
        return len(self.due)


class Pauses:
    def __init__(self, *pauses: BillingPause) -> None:
        self.found = list(pauses)

    def pauses(
        self, owners: Mapping[str, str], start: datetime, end: datetime, as_of: datetime | None
    ) -> list[BillingPause]:
        return [p for p in self.found if p.contract in owners]


@pytest.fixture
def no_sources() -> Iterator[None]:
    with sources_replaced(Sources()):
        yield


def november(**terms: object) -> Contract:
    """November: 50 served requests × 2.00 = 100.00 net, 6 % tax."""
    contract = ContractFactory.create(tax_rate=Decimal("0.06"), **terms)
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=Decimal("2.00"))
    send(contract, 50, at(2026, 11, 5))
    return contract


def goodwill(reference: int, amount: str, currency: str = "CNY") -> InvoiceCredit:
    return InvoiceCredit(
        reference, Decimal(amount), currency, f"Goodwill credit #{reference}", {"case": "K-1"}
    )


def test_a_registered_credit_becomes_a_line_and_the_source_learns_which() -> None:
    contract = november()
    credits = Credits(goodwill(7, "30.00"), goodwill(8, "5.00", currency="USD"))

    with sources_replaced(Sources(credits=credits)):
        invoice = generate_invoice(contract.pk, *NOV, now=AFTER_NOV)

    (line,) = invoice.lines.filter(kind=InvoiceLine.Kind.SERVICE_CREDIT)
    assert (line.quantity, line.unit_price, line.amount, line.description) == (
        Decimal("1"),
        Decimal("-30.00"),
        Decimal("-30.00"),
        "Goodwill credit #7",
    )
    assert line.details == {"service_credit": 7, "case": "K-1"}
    # 100.00 − 30.00 = 70.00 net, 6 % tax on it.
    assert (invoice.subtotal, invoice.tax, invoice.total) == (
        Decimal("70.00"),
        Decimal("4.20"),
        Decimal("74.20"),
    )
    reason = "currency_mismatch: the credit is in USD, the invoice in CNY"
    assert credits.asked == [(contract.pk, None, NOV[0])]
    assert credits.recorded == [(invoice.pk, [(7, line.pk)], [(8, reason)])]
    assert invoice.terms["service_credits_held"] == [{"service_credit": 8, "reason": reason}]


def test_voiding_the_invoice_releases_its_credits_through_the_source() -> None:
    contract = november()
    credits = Credits(goodwill(7, "30.00"))

    with sources_replaced(Sources(credits=credits)):
        invoice = void_invoice(generate_invoice(contract.pk, *NOV, now=AFTER_NOV))

    assert invoice.status == "void" and credits.released == [invoice.pk]


def test_a_draft_rerated_in_grace_asks_again_for_the_credits_on_it() -> None:
    contract = november(grace_days=5)
    credits = Credits(goodwill(7, "30.00"))

    with sources_replaced(Sources(credits=credits)):
        draft = generate_invoice(contract.pk, *NOV, now=AFTER_NOV)
        rerated = generate_invoice(contract.pk, *NOV, now=AFTER_NOV + timedelta(days=1))

    (line,) = rerated.lines.filter(kind=InvoiceLine.Kind.SERVICE_CREDIT)
    assert draft.pk == rerated.pk and rerated.status == "grace"
    assert credits.asked == [(contract.pk, None, NOV[0]), (contract.pk, draft.pk, NOV[0])]
    assert credits.recorded[-1] == (draft.pk, [(7, line.pk)], [])


def test_the_invoice_run_bills_a_contract_with_credits_due_as_generate_invoice_does() -> None:
    contract = november()
    credits = Credits(goodwill(7, "30.00"))

    with sources_replaced(Sources(credits=credits)):
        assert run_invoices("2026-11")["failed"] == {}

    invoice = Invoice.objects.get(contract=contract, period_start=NOV[0])
    (line,) = invoice.lines.filter(kind=InvoiceLine.Kind.SERVICE_CREDIT)
    assert (invoice.total, line.amount) == (Decimal("74.20"), Decimal("-30.00"))
    assert credits.recorded == [(invoice.pk, [(7, line.pk)], [])]


def test_a_registered_pause_leaves_its_records_out_of_rating() -> None:
    contract = november()
    send(contract, 4, at(2026, 11, 20, 10))
    send(contract, 2, at(2026, 11, 20, 10), status="error")
    pause = BillingPause(
        reference=3,
        contract=contract.code,
        starts_at=datetime(2026, 11, 20, 10, tzinfo=UTC),
        ends_at=datetime(2026, 11, 20, 11, tzinfo=UTC),
        failed_only=False,
        reason="The customer's gateway was down",
    )

    with sources_replaced(Sources(pauses=Pauses(pause))):
        invoice = generate_invoice(contract.pk, *NOV, now=AFTER_NOV)

    assert invoice.lines.get(kind="usage", dimension="requests").quantity == Decimal(50)
    assert invoice.terms["exclusions"] == {
        "records": 6,
        "by_dispute": 0,
        "by_sla_pause": 6,
        "by_retry": 0,
        "disputes": [],
        "sla_exclusions": [
            {
                "id": 3,
                "scope": "all",
                "starts_at": "2026-11-20T10:00:00+00:00",
                "ends_at": "2026-11-20T11:00:00+00:00",
                "reason": "The customer's gateway was down",
            }
        ],
    }


@pytest.mark.usefixtures("no_sources")
def test_without_sources_billing_has_no_pauses_and_no_credits() -> None:
    contract = november(pause_billing_on_customer_dependency=True)
    send(contract, 4, at(2026, 11, 20, 10))
    ops = User.objects.create_user("ops", is_staff=True)
    declare_exclusion(
        contract,
        kind=Exclusion.Kind.CUSTOMER_DEPENDENCY,
        scope=Exclusion.Scope.ALL,
        starts_at=datetime(2026, 11, 20, 10, tzinfo=UTC),
        ends_at=datetime(2026, 11, 20, 11, tzinfo=UTC),
        reason="The customer's gateway was down",
        declared_by=ops,
    )

    invoice = generate_invoice(contract.pk, *NOV, now=AFTER_NOV)
    void_invoice(invoice)

    assert invoice.lines.get(kind="usage", dimension="requests").quantity == Decimal(54)
    assert not invoice.lines.filter(kind=InvoiceLine.Kind.SERVICE_CREDIT).exists()
    assert "exclusions" not in invoice.terms and "service_credits_held" not in invoice.terms
