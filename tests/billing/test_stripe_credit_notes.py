"""Credit notes reach Stripe: a Refund of a paid PaymentIntent, an open one lowered or canceled, nothing
for an invoice not pushed yet (its push charges the net amount). Against the local fake Stripe API.
Debit notes and invoices settled by credit notes: tests/billing/test_stripe_debit_notes.py."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal as D
from typing import Any

import pytest
import stripe
from celery.exceptions import Retry
from django.test import Client

from billing.models import Invoice, Note, StripeNote, StripePayment
from billing.services import generate_invoice, grant_credits
from billing.settlement import issue_note
from billing.tasks import push_invoice_task, push_note_task
from common.periods import month_bounds
from contracts.models import ContractPrice
from pricing.errors import BillingError
from tests.billing.fake_stripe import FakeStripe
from tests.billing.test_stripe import final_invoice, post_event
from tests.factories import ContractFactory

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]


def pushed(invoice: Invoice) -> str:
    return str(push_invoice_task.delay(invoice.pk).get())


def paid(stripe_api: FakeStripe, client: Client, invoice: Invoice) -> str:
    intent_id = pushed(invoice)
    assert post_event(client, stripe_api.pay_intent(intent_id, f"evt_pay_{invoice.pk}")).status_code == 200
    return intent_id


def credit(invoice: Invoice, amount: str) -> Note:
    return issue_note(invoice, "credit", D(amount), "goodwill")


def row(note: Note) -> tuple[str, str, D | None, str, int, str]:
    r = StripeNote.objects.get(note=note)
    return (r.action, r.status, r.amount, r.stripe_id, r.attempts, r.last_error)


def test_a_credit_note_on_a_paid_invoice_is_refunded_once_in_minor_units(
    stripe_api: FakeStripe, client: Client
) -> None:
    invoice = final_invoice("CNY", "1234.56")
    intent_id = paid(stripe_api, client, invoice)
    note = credit(invoice, "12.34")

    assert push_note_task.delay(note.pk).get() == "re_3"
    assert push_note_task.delay(note.pk).get() == "re_3"  # sent already: no new request

    refund = stripe_api.objects["re_3"]
    assert (refund["payment_intent"], refund["amount"], refund["status"]) == (intent_id, 1234, "succeeded")
    assert refund["metadata"] == {"credit_note": note.number, "credit_note_id": str(note.pk)}
    assert row(note) == ("refund", "pushed", D("12.34"), "re_3", 1, "")
    assert [(r[1], r[2], r[3]) for r in stripe_api.requests[2:]] == [
        (
            "/v1/refunds",
            {
                "payment_intent": intent_id,
                "amount": "1234",
                "metadata[credit_note]": note.number,
                "metadata[credit_note_id]": str(note.pk),
            },
            f"credit-note-treemeter-{note.number}",
        )
    ]
    assert StripePayment.objects.get(invoice=invoice).amount == D("1234.56")  # from amount_received


def test_a_credit_note_on_an_unpaid_pushed_invoice_lowers_the_payment_intent(stripe_api: FakeStripe) -> None:
    invoice = final_invoice("CNY", "1234.56")
    intent_id = pushed(invoice)
    first = credit(invoice, "234.56")
    assert push_note_task.delay(first.pk).get() == intent_id
    second = credit(invoice, "0.01")
    assert push_note_task.delay(second.pk).get() == intent_id

    assert stripe_api.objects[intent_id]["amount"] == 99999
    assert stripe_api.objects[intent_id]["status"] == "requires_payment_method"
    assert [(r[1], r[2]) for r in stripe_api.requests[2:]] == [
        (f"/v1/payment_intents/{intent_id}", {"amount": "100000"}),
        (f"/v1/payment_intents/{intent_id}", {"amount": "99999"}),
    ]
    assert row(first) == ("reduce", "pushed", D("1000.00"), intent_id, 1, "")
    assert row(second) == ("reduce", "pushed", D("999.99"), intent_id, 1, "")
    payment = StripePayment.objects.get(invoice=invoice)
    assert (payment.status, payment.amount) == ("pushed", D("999.99"))


def test_a_credit_covering_the_amount_due_cancels_the_payment_intent(stripe_api: FakeStripe) -> None:
    invoice = final_invoice("CNY", "1234.56")
    intent_id = pushed(invoice)
    note = credit(invoice, "1234.56")

    assert push_note_task.delay(note.pk).get() == intent_id

    assert stripe_api.objects[intent_id]["status"] == "canceled"
    assert stripe_api.requests[-1][1] == f"/v1/payment_intents/{intent_id}/cancel"
    assert row(note) == ("cancel", "pushed", D("0.00"), intent_id, 1, "")
    payment = StripePayment.objects.get(invoice=invoice)
    assert (payment.status, payment.amount) == ("canceled", D("0.00"))


def test_a_retry_after_a_stripe_outage_never_refunds_twice(stripe_api: FakeStripe, client: Client) -> None:
    invoice = final_invoice("CNY", "1234.56")
    intent_id = paid(stripe_api, client, invoice)
    note = credit(invoice, "12.34")
    stripe_api.fail_next = 1

    with pytest.raises(Retry) as raised:
        push_note_task.apply(args=[note.pk], retries=0, throw=True)
    assert raised.value.when == 2
    assert row(note) == ("", "pending", None, "", 1, "APIError: fake outage")

    assert push_note_task.apply(args=[note.pk], retries=1).get() == "re_3"
    # Stripe refunded, but the answer was lost: the next attempt sends the same key again.
    StripeNote.objects.filter(note=note).update(status="pending", action="", amount=None, stripe_id="")
    assert push_note_task.apply(args=[note.pk], retries=2).get() == "re_3"

    assert [r["id"] for r in stripe_api.refunds_of(intent_id)] == ["re_3"]
    keys = [r[3] for r in stripe_api.requests if r[1] == "/v1/refunds"]
    assert keys == [f"credit-note-treemeter-{note.number}"] * 3
    assert row(note) == ("refund", "pushed", D("12.34"), "re_3", 3, "")


def test_a_refund_that_keeps_failing_is_marked_failed(stripe_api: FakeStripe, client: Client) -> None:
    invoice = final_invoice("CNY", "1234.56")
    paid(stripe_api, client, invoice)
    note = credit(invoice, "12.34")
    stripe_api.fail_next = 100
    with pytest.raises(stripe.APIError, match="fake outage"):
        push_note_task.apply(args=[note.pk], retries=8, throw=True)  # the last allowed retry
    assert row(note) == ("", "failed", None, "", 1, "APIError: fake outage")


def test_a_never_pushed_invoice_sends_nothing_and_its_push_nets_the_credit(stripe_api: FakeStripe) -> None:
    invoice = final_invoice("CNY", "1234.56")  # finalised outside on_commit: the push never ran
    note = credit(invoice, "234.56")

    assert push_note_task.delay(note.pk).get() == ""

    assert stripe_api.requests == []
    assert row(note) == ("", "skipped", None, "", 1, "")
    invoice.refresh_from_db()
    assert invoice.amount_due == D("1000.00")  # the credit note lowered what is owed; the push charges it
    intent_id = pushed(invoice)
    assert stripe_api.objects[intent_id]["amount"] == 100000
    assert StripePayment.objects.get(invoice=invoice).amount == D("1000.00")


def test_a_credit_note_waits_for_an_invoice_push_in_flight(stripe_api: FakeStripe) -> None:
    invoice = final_invoice("CNY", "1234.56")
    stripe_api.fail_next = 1
    with pytest.raises(Retry):
        push_invoice_task.apply(args=[invoice.pk], retries=0, throw=True)  # the push retries later
    note = credit(invoice, "234.56")

    with pytest.raises(Retry):
        push_note_task.apply(args=[note.pk], retries=0, throw=True)
    assert row(note)[:2] == ("", "pending")
    assert row(note)[5] == f"invoice_push_in_flight: Invoice {invoice.number} is being pushed to Stripe."

    intent_id = pushed(invoice)  # the push's retry already charges the net amount
    assert push_note_task.apply(args=[note.pk], retries=1).get() == intent_id
    assert stripe_api.objects[intent_id]["amount"] == 100000
    assert row(note) == ("reduce", "pushed", D("1000.00"), intent_id, 2, "")


def test_a_refund_beyond_what_was_paid_is_refused_with_a_code(stripe_api: FakeStripe, client: Client) -> None:
    contract = ContractFactory.create(currency="CNY", base_fee=D("1234.56"))
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=D("1"))
    grant_credits(contract, D("1000.00"), "prepaid")
    invoice = generate_invoice(contract.pk, *month_bounds("2026-11"), now=datetime(2026, 12, 2, tzinfo=UTC))
    assert invoice.amount_due == D("234.56")  # the wallet paid 1000.00; Stripe is charged the rest
    intent_id = paid(stripe_api, client, invoice)
    first, second = credit(invoice, "200.00"), credit(invoice, "34.57")

    assert push_note_task.delay(first.pk).get() == "re_3"
    with pytest.raises(BillingError) as refused:
        push_note_task.delay(second.pk)

    assert refused.value.code == "refund_exceeds_payment"
    status, error = row(second)[1], row(second)[5]
    assert status == "failed"
    assert error == (
        f"refund_exceeds_payment: Credit note {second.number} (34.57 CNY) exceeds the 34.56 CNY paid "
        "through Stripe and not refunded yet."
    )
    assert [r["amount"] for r in stripe_api.refunds_of(intent_id)] == [20000]


def test_a_refund_that_fails_at_stripe_is_marked_once(stripe_api: FakeStripe, client: Client) -> None:
    invoice = final_invoice("CNY", "1234.56")
    paid(stripe_api, client, invoice)
    note = credit(invoice, "12.34")
    refund_id = push_note_task.delay(note.pk).get()
    event = stripe_api.fail_refund(refund_id, "evt_refund_failed")

    first, again = post_event(client, event), post_event(client, event)

    assert (first.json()["duplicate"], again.json()["duplicate"]) == (False, True)
    failure = "Refund failed: expired_or_canceled_card"
    assert row(note) == ("refund", "failed", D("12.34"), refund_id, 1, failure)
    requests = len(stripe_api.requests)
    assert push_note_task.delay(note.pk).get() == refund_id  # not sent again: a person decides
    assert (len(stripe_api.requests), row(note)[1]) == (requests, "failed")


def test_issuing_a_credit_note_pushes_it_after_commit(
    stripe_api: FakeStripe, client: Client, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    invoice = final_invoice("CNY", "1234.56")
    intent_id = paid(stripe_api, client, invoice)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        note = credit(invoice, "12.34")
        debit = issue_note(invoice, "debit", D("5.00"), "courier")
    assert len(callbacks) == 2
    assert row(note) == ("refund", "pushed", D("12.34"), "re_3", 1, "")
    assert row(debit)[:3] == ("charge", "pushed", D("5.00"))
    assert [r["amount"] for r in stripe_api.refunds_of(intent_id)] == [1234]

    settings.STRIPE_API_KEY = ""
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        unsent = credit(invoice, "1.00")
    assert (callbacks, StripeNote.objects.filter(note=unsent).exists()) == ([], False)
