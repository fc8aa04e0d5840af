"""Debit notes are charged through Stripe as PaymentIntents of their own; credit notes that cover an
invoice's amount due settle it. Against the local fake Stripe API, with real webhook signatures."""

from __future__ import annotations

from decimal import Decimal as D
from typing import Any

import pytest
from django.test import Client

from billing.models import Invoice, StripeNote, StripePayment
from billing.settlement import issue_note
from billing.tasks import push_invoice_task, push_note_task
from tests.billing.fake_stripe import FakeStripe
from tests.billing.test_stripe import final_invoice, post_event
from webhooks.models import WebhookEvent

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]


def note_row(note_id: int) -> tuple[str, str, D | None, str, str]:
    r = StripeNote.objects.get(note_id=note_id)
    return (r.action, r.status, r.amount, r.stripe_id, r.last_error)


def test_a_debit_note_on_a_paid_invoice_is_charged_once_as_its_own_payment_intent(
    stripe_api: FakeStripe, client: Client
) -> None:
    invoice = final_invoice("CNY", "1234.56")
    invoice_intent = push_invoice_task.delay(invoice.pk).get()
    assert post_event(client, stripe_api.pay_intent(invoice_intent, "evt_pay")).status_code == 200
    note = issue_note(invoice, "debit", D("45.67"), "courier surcharge")

    intent_id = push_note_task.delay(note.pk).get()
    assert push_note_task.delay(note.pk).get() == intent_id  # sent already: no new request

    assert intent_id != invoice_intent
    intent = stripe_api.objects[intent_id]
    assert (intent["amount"], intent["currency"], intent["customer"]) == (4567, "cny", "cus_1")
    assert intent["metadata"] == {
        "debit_note": note.number,
        "debit_note_id": str(note.pk),
        "invoice": invoice.number,
    }
    assert [r[3] for r in stripe_api.requests if r[1] == "/v1/payment_intents"] == [
        f"invoice-treemeter-{invoice.number}",
        f"debit-note-treemeter-{note.number}",
    ]
    assert note_row(note.pk) == ("charge", "pushed", D("45.67"), intent_id, "")

    assert post_event(client, stripe_api.pay_intent(intent_id, "evt_debit_paid")).status_code == 200
    assert note_row(note.pk) == ("charge", "paid", D("45.67"), intent_id, "")
    invoice.refresh_from_db()
    assert invoice.status == "paid"
    payment = StripePayment.objects.get(invoice=invoice)
    assert (payment.payment_intent_id, payment.amount) == (invoice_intent, D("1234.56"))  # untouched


def test_a_declined_debit_note_payment_is_visible_with_stripes_reason(
    stripe_api: FakeStripe, client: Client
) -> None:
    invoice = final_invoice("JPY", "12000")
    note = issue_note(invoice, "debit", D("300"), "missed usage")
    intent_id = push_note_task.delay(note.pk).get()
    assert stripe_api.objects[intent_id]["amount"] == 300  # JPY has no minor unit

    assert post_event(client, stripe_api.fail_intent(intent_id, "evt_declined")).status_code == 200
    assert note_row(note.pk) == (
        "charge",
        "failed",
        D("300"),
        intent_id,
        "Payment failed: Your card was declined.",
    )
    assert push_note_task.delay(note.pk).get() == intent_id  # not charged again: a person decides


def test_credit_notes_that_cover_the_amount_due_settle_the_invoice(
    stripe_api: FakeStripe, django_capture_on_commit_callbacks: Any
) -> None:
    invoice = final_invoice("CNY", "1000.00")
    intent_id = push_invoice_task.delay(invoice.pk).get()

    with django_capture_on_commit_callbacks(execute=True):
        issue_note(invoice, "credit", D("400.00"), "outage")
    invoice.refresh_from_db()
    assert (invoice.status, invoice.paid_at) == ("finalized", None)
    assert stripe_api.objects[intent_id]["amount"] == 60000

    with django_capture_on_commit_callbacks(execute=True):
        last = issue_note(invoice, "credit", D("600.00"), "outage, rest")
    invoice.refresh_from_db()
    assert invoice.status == "paid" and invoice.paid_at is not None
    assert stripe_api.objects[intent_id]["status"] == "canceled"
    assert note_row(last.pk)[:2] == ("cancel", "pushed")
    assert (
        WebhookEvent.objects.filter(type="invoice.paid", event_id=f"invoice.paid:{invoice.pk}").count() == 1
    )


def test_an_invoice_settled_before_its_push_charges_nothing(
    stripe_api: FakeStripe, django_capture_on_commit_callbacks: Any
) -> None:
    invoice = final_invoice("CNY", "80.00")  # finalised outside on_commit: its push has not run
    with django_capture_on_commit_callbacks(execute=True):
        note = issue_note(invoice, "credit", D("80.00"), "pilot month waived")
    invoice.refresh_from_db()
    assert invoice.status == Invoice.Status.PAID

    assert push_invoice_task.delay(invoice.pk).get() == ""
    payment = StripePayment.objects.get(invoice=invoice)
    assert (payment.status, payment.amount) == ("canceled", D("0"))
    assert note_row(note.pk)[:2] == ("", "skipped")
    assert [r[1] for r in stripe_api.requests] == []


def test_a_partial_credit_leaves_the_invoice_to_be_paid_and_debits_do_not_count(
    stripe_api: FakeStripe,
) -> None:
    invoice = final_invoice("CNY", "500.00")
    issue_note(invoice, "debit", D("100.00"), "extra")
    issue_note(invoice, "credit", D("499.99"), "goodwill")
    invoice.refresh_from_db()
    assert invoice.status == "finalized"  # 0.01 of the amount due is still to pay
