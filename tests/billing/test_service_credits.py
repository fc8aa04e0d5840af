"""SLA service credits become one credit line on the next invoice, once (billing.service_credits)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from billing.models import Invoice, InvoiceLine
from billing.pdf import render_invoice_pdf
from billing.selectors import invoice_with_lines
from billing.services import generate_invoice, void_invoice
from billing.tasks import run_invoices
from common.periods import month_bounds
from contracts.models import Contract, ContractPrice
from sla.models import ServiceCredit
from sla.tasks import close_period_task
from tests.billing.usage import at, send
from tests.factories import ContractFactory
from tests.pdf_text import pdf_text
from tests.sla.helpers import make_policy

pytestmark = pytest.mark.usefixtures("clickhouse")
NOV = month_bounds("2026-11")
AFTER_NOV = datetime(2026, 12, 2, tzinfo=UTC)


def october_breach(**terms: Any) -> Contract:
    """October: 96 of 100 requests served (availability 96 % < 99 %: the 25 % rung), 96 × 2.00 = 192.00
    net, invoiced and SLA-closed through the real paths; November: 50 served, 100.00 net."""
    contract = ContractFactory.create(tax_rate=Decimal("0.06"), **terms)
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=Decimal("2.00"))
    make_policy(contract)
    send(contract, 96, at(2026, 10, 10))
    send(contract, 4, at(2026, 10, 11), status="error")
    send(contract, 50, at(2026, 11, 5))
    october = generate_invoice(contract.pk, *month_bounds("2026-10"), now=AFTER_NOV)
    assert (october.subtotal, october.tax, october.total) == (
        Decimal("192.00"),
        Decimal("11.52"),
        Decimal("203.52"),
    )
    closed = close_period_task.apply(args=(contract.code, "2026-10")).get()
    assert closed["credit"] is not None
    return contract


def credit_line(invoice: Invoice) -> InvoiceLine:
    (line,) = invoice.lines.filter(kind=InvoiceLine.Kind.SERVICE_CREDIT)
    return line


@pytest.mark.django_db
def test_a_breached_month_becomes_one_credit_line_on_the_next_invoice_run() -> None:
    contract = october_breach()
    credit = ServiceCredit.objects.get(contract=contract)
    assert (credit.fee_basis, credit.credit_percent, credit.amount, credit.status) == (
        Decimal("192.00"),  # the net fee: the credit line sits before tax, so tax drops by 25 % too
        Decimal("25.0000"),
        Decimal("48.00"),
        "pending",
    )

    first = run_invoices("2026-11")
    second = run_invoices("2026-11")
    close_period_task.apply(args=(contract.code, "2026-10")).get()  # the SLA close again: nothing new

    assert first["failed"] == second["failed"] == {}
    invoice = Invoice.objects.get(contract=contract, period_start=NOV[0])
    line = credit_line(invoice)
    report = credit.report
    assert (line.quantity, line.unit_price, line.amount) == (
        Decimal("1"),
        Decimal("-48.00"),
        Decimal("-48.00"),
    )
    assert line.description == (
        f"SLA service credit 25 % for 2026-10: availability 96.0000 % vs target 99.9000 % (< 99 % → 25 %), "
        f"SLA report #{report.pk}"
    )
    assert line.details["ladder_step"] == {"below_percent": "99.0000", "credit_percent": "25.0000"}
    assert (line.details["sla_report"], line.details["service_credit"]) == (report.pk, credit.pk)
    # 100.00 usage − 48.00 credit = 52.00 net; tax 6 % of it = 3.12; 55.12 due.
    assert (invoice.subtotal, invoice.tax, invoice.total, invoice.amount_due) == (
        Decimal("52.00"),
        Decimal("3.12"),
        Decimal("55.12"),
        Decimal("55.12"),
    )
    assert invoice.status == "finalized"
    assert invoice.subtotal == sum(invoice.lines.values_list("amount", flat=True))
    credit.refresh_from_db()
    assert (credit.status, credit.invoice_id, credit.invoice_line_id, credit.held_reason) == (
        "applied",
        invoice.pk,
        line.pk,
        "",
    )
    assert ServiceCredit.objects.count() == 1
    assert InvoiceLine.objects.filter(kind=InvoiceLine.Kind.SERVICE_CREDIT).count() == 1

    # December's invoice does not take it again.
    december = generate_invoice(contract.pk, *month_bounds("2026-12"), now=datetime(2027, 1, 2, tzinfo=UTC))
    assert not december.lines.filter(kind=InvoiceLine.Kind.SERVICE_CREDIT).exists()


@pytest.mark.django_db
def test_a_draft_rerated_in_grace_keeps_one_credit_line_and_finalises_with_it() -> None:
    contract = october_breach(grace_days=5)  # October's grace ended on November 6th

    draft = generate_invoice(contract.pk, *NOV, now=AFTER_NOV)
    send(contract, 10, at(2026, 11, 6))  # a late record during the grace period
    rerated = generate_invoice(contract.pk, *NOV, now=datetime(2026, 12, 3, tzinfo=UTC))
    final = generate_invoice(contract.pk, *NOV, now=datetime(2026, 12, 7, tzinfo=UTC))

    assert draft.pk == rerated.pk == final.pk and final.status == "finalized"
    line = credit_line(final)
    assert line.amount == Decimal("-48.00")
    # 60 × 2.00 − 48.00 = 72.00; tax 4.32.
    assert (final.subtotal, final.tax, final.total) == (Decimal("72.00"), Decimal("4.32"), Decimal("76.32"))
    credit = ServiceCredit.objects.get(contract=contract)
    assert (credit.status, credit.invoice_line_id) == ("applied", line.pk)


@pytest.mark.django_db(transaction=True)
def test_concurrent_invoice_runs_apply_the_credit_once() -> None:
    contract = october_breach()
    invoices: list[int] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        barrier.wait()
        try:
            invoices.append(generate_invoice(contract.pk, *NOV, now=AFTER_NOV).pk)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(invoices) == 4 and len(set(invoices)) == 1
    invoice = Invoice.objects.get(pk=invoices[0])
    assert InvoiceLine.objects.filter(kind=InvoiceLine.Kind.SERVICE_CREDIT).count() == 1
    assert (credit_line(invoice).amount, invoice.total) == (Decimal("-48.00"), Decimal("55.12"))
    assert ServiceCredit.objects.get(contract=contract).invoice_line_id == credit_line(invoice).pk


@pytest.mark.django_db
def test_a_credit_in_another_currency_stays_pending_and_is_reported() -> None:
    contract = october_breach()
    ServiceCredit.objects.filter(contract=contract).update(currency="USD")

    invoice = generate_invoice(contract.pk, *NOV, now=AFTER_NOV)

    credit = ServiceCredit.objects.get(contract=contract)
    assert not invoice.lines.filter(kind=InvoiceLine.Kind.SERVICE_CREDIT).exists()
    assert invoice.total == Decimal("106.00")
    assert (credit.status, credit.invoice_id) == ("pending", None)
    assert credit.held_reason == "currency_mismatch: the credit is in USD, the invoice in CNY"
    assert invoice.terms["service_credits_held"] == [
        {"service_credit": credit.pk, "reason": credit.held_reason}
    ]


@pytest.mark.django_db
def test_a_credit_larger_than_the_invoice_stays_pending() -> None:
    contract = october_breach()
    ServiceCredit.objects.filter(contract=contract).update(amount=Decimal("100.01"))

    invoice = generate_invoice(contract.pk, *NOV, now=AFTER_NOV)

    credit = ServiceCredit.objects.get(contract=contract)
    assert invoice.total == Decimal("106.00") and credit.status == "pending"
    assert credit.held_reason == "exceeds_invoice: 100.01 CNY is more than the 100.00 left"


@pytest.mark.django_db
def test_the_credit_line_in_the_api_and_the_pdf() -> None:
    contract = october_breach()
    invoice = generate_invoice(contract.pk, *NOV, now=AFTER_NOV)
    staff = get_user_model().objects.create_user("ops", is_staff=True)
    client = Client()
    client.force_login(staff)

    body = client.get(f"/v1/invoices/{invoice.pk}").json()
    lines = [line for line in body["lines"] if line["kind"] == "service_credit"]
    assert [(line["amount"], line["details"]["month"]) for line in lines] == [("-48.00", "2026-10")]
    (credit,) = client.get("/v1/sla/credits").json()["results"]
    assert (credit["status"], credit["invoice"], credit["held_reason"]) == ("applied", invoice.pk, "")

    text = pdf_text(render_invoice_pdf(invoice_with_lines(invoice.pk), "en"))
    assert "SLA service credit 25 % for 2026-10" in text and "-48.00" in text


@pytest.mark.django_db
def test_voiding_the_invoice_gives_the_credit_back_to_the_next_one() -> None:
    contract = october_breach()
    november = generate_invoice(contract.pk, *NOV, now=AFTER_NOV)
    void_invoice(november)

    credit = ServiceCredit.objects.get(contract=contract)
    assert (credit.status, credit.invoice_id, credit.invoice_line_id) == ("pending", None, None)
    assert credit.held_reason == f"released: invoice {november.number} was voided"
    assert credit_line(november).amount == Decimal("-48.00")  # the void invoice keeps its history

    send(contract, 30, at(2026, 12, 1))  # December so far (not in the future)
    december = generate_invoice(contract.pk, *month_bounds("2026-12"), now=datetime(2027, 1, 2, tzinfo=UTC))
    credit.refresh_from_db()
    assert (december.subtotal, december.total) == (Decimal("12.00"), Decimal("12.72"))  # 60.00 − 48.00
    assert (credit.status, credit.invoice_id, credit.invoice_line_id) == (
        "applied",
        december.pk,
        credit_line(december).pk,
    )
