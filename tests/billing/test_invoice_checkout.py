"""Paying an invoice through Stripe Checkout (the portal's Pay action), against the local fake Stripe API
with real webhook signatures: the session charges the amount due, its payment pays the invoice and
supersedes the pushed PaymentIntent, and money received beyond the amount due goes back."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal as D
from typing import Any

import pytest
from django.test import Client

from billing.checkout import start_invoice_checkout
from billing.models import Invoice, StripePayment
from billing.services import generate_invoice, grant_credits
from billing.settlement import issue_note
from billing.tasks import push_invoice_task
from common.periods import month_bounds
from pricing.errors import BillingError
from tests.billing.fake_stripe import FakeStripe
from tests.billing.test_stripe import final_invoice, post_event
from tests.factories import ContractFactory

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]

PAGE = "http://portal.test/invoices/1"


def session_of(stripe_api: FakeStripe, url: str) -> dict[str, Any]:
    return stripe_api.objects[url.rsplit("/", 1)[1]]


def pay(stripe_api: FakeStripe, client: Client, url: str, event_id: str, capture: Any) -> None:
    with capture(execute=True):  # the cancel and refund tasks run after the webhook's commit
        answer = post_event(client, stripe_api.pay_checkout(session_of(stripe_api, url)["id"], event_id))
    assert answer.status_code == 200, answer.content


def test_pay_opens_one_session_for_the_amount_due(stripe_api: FakeStripe) -> None:
    invoice = final_invoice(fee="1234.56")

    url = start_invoice_checkout(invoice, PAGE)

    session = session_of(stripe_api, url)
    assert (session["amount_total"], session["currency"], session["mode"]) == (123456, "cny", "payment")
    assert session["metadata"] == {
        "invoice": invoice.number,
        "invoice_id": str(invoice.pk),
        "tenant": invoice.tenant.code,
    }
    assert session["payment_intent_data"]["metadata"]["invoice_id"] == str(invoice.pk)
    assert session["success_url"] == f"{PAGE}?payment=success"
    assert start_invoice_checkout(invoice, PAGE) == url  # a second click: the same session
    assert StripePayment.objects.get(invoice=invoice).checkout_session_id == session["id"]


def test_a_paid_session_pays_the_invoice_and_cancels_the_pushed_intent(
    stripe_api: FakeStripe, client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    invoice = final_invoice(fee="100.00")
    pushed = push_invoice_task.delay(invoice.pk).get()
    url = start_invoice_checkout(invoice, PAGE)

    pay(stripe_api, client, url, "evt_cs_paid", django_capture_on_commit_callbacks)

    invoice.refresh_from_db()
    payment = StripePayment.objects.get(invoice=invoice)
    assert invoice.status == Invoice.Status.PAID and invoice.paid_at is not None
    paid_with = session_of(stripe_api, url)["payment_intent"]
    assert (payment.status, payment.payment_intent_id, payment.amount) == (
        "succeeded",
        paid_with,
        D("100.00"),
    )
    assert (payment.superseded_intent_id, stripe_api.objects[pushed]["status"]) == (pushed, "canceled")
    assert not stripe_api.refunds_of(paid_with)
    # Stripe redelivers the event: nothing more happens.
    requests = len(stripe_api.requests)
    pay(stripe_api, client, url, "evt_cs_paid", django_capture_on_commit_callbacks)
    assert len(stripe_api.requests) == requests


def test_a_later_credit_note_refunds_the_checkout_payment(
    stripe_api: FakeStripe, client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    invoice = final_invoice(fee="100.00")
    url = start_invoice_checkout(invoice, PAGE)
    pay(stripe_api, client, url, "evt_cs_paid", django_capture_on_commit_callbacks)

    with django_capture_on_commit_callbacks(execute=True):
        issue_note(Invoice.objects.get(pk=invoice.pk), "credit", D("30.00"), "goodwill")

    [refund] = stripe_api.refunds_of(session_of(stripe_api, url)["payment_intent"])
    assert refund["amount"] == 3000


def test_a_credit_note_issued_while_the_session_was_open_is_given_back(
    stripe_api: FakeStripe, client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    invoice = final_invoice(fee="100.00")
    url = start_invoice_checkout(invoice, PAGE)  # for 100.00
    issue_note(invoice, "credit", D("25.00"), "goodwill")  # the invoice now asks 75.00

    pay(stripe_api, client, url, "evt_cs_paid", django_capture_on_commit_callbacks)

    intent = session_of(stripe_api, url)["payment_intent"]
    [refund] = stripe_api.refunds_of(intent)
    assert (refund["amount"], refund["metadata"]["invoice"]) == (2500, invoice.number)
    assert StripePayment.objects.get(invoice=invoice).amount == D("75.00")


def test_an_invoice_paid_twice_gets_the_second_payment_back_in_full(
    stripe_api: FakeStripe, client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    invoice = final_invoice(fee="100.00")
    url = start_invoice_checkout(invoice, PAGE)
    pushed = push_invoice_task.delay(invoice.pk).get()
    assert post_event(client, stripe_api.pay_intent(pushed, "evt_pi_paid")).status_code == 200  # paid first

    pay(stripe_api, client, url, "evt_cs_paid", django_capture_on_commit_callbacks)

    [refund] = stripe_api.refunds_of(session_of(stripe_api, url)["payment_intent"])
    assert refund["amount"] == 10000
    payment = StripePayment.objects.get(invoice=invoice)
    assert (payment.payment_intent_id, payment.status) == (pushed, "succeeded")  # the first payment stands


def test_a_superseded_intent_paid_after_all_is_refunded_in_full(
    stripe_api: FakeStripe, client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    invoice = final_invoice(fee="100.00")
    pushed = push_invoice_task.delay(invoice.pk).get()
    url = start_invoice_checkout(invoice, PAGE)
    stripe_api.objects[pushed]["status"] = "processing"  # too late to cancel: it is being paid
    pay(stripe_api, client, url, "evt_cs_paid", django_capture_on_commit_callbacks)

    with django_capture_on_commit_callbacks(execute=True):
        stripe_api.objects[pushed]["status"] = "requires_capture"
        assert post_event(client, stripe_api.pay_intent(pushed, "evt_pi_paid")).status_code == 200

    [refund] = stripe_api.refunds_of(pushed)
    assert refund["amount"] == 10000
    payment = StripePayment.objects.get(invoice=invoice)
    assert payment.payment_intent_id == session_of(stripe_api, url)["payment_intent"]


@pytest.mark.parametrize(
    ("state", "code"),
    [
        ("paid", "invoice_paid"),
        ("credited", "invoice_paid"),
        ("prepaid", "nothing_due"),
        ("draft", "invoice_not_final"),
    ],
)
def test_what_cannot_be_paid_is_refused_with_a_code(stripe_api: FakeStripe, state: str, code: str) -> None:
    if state == "prepaid":  # prepaid credits cover the invoice: finalised, nothing due
        contract = ContractFactory.create(currency="CNY", base_fee=D("100.00"))
        grant_credits(contract, D("100.00"), "prepaid")
        invoice = generate_invoice(
            contract.pk, *month_bounds("2026-11"), now=datetime(2026, 12, 2, tzinfo=UTC)
        )
        assert (invoice.status, invoice.amount_due) == (Invoice.Status.FINALIZED, 0)
    else:
        invoice = final_invoice(fee="100.00")
    if state == "paid":
        Invoice.objects.filter(pk=invoice.pk).update(status=Invoice.Status.PAID)
    elif state == "credited":  # a credit note covering the amount due settles it: paid
        issue_note(invoice, "credit", D("100.00"), "waived")
    elif state == "draft":
        Invoice.objects.filter(pk=invoice.pk).update(status=Invoice.Status.DRAFT)
    invoice.refresh_from_db()

    with pytest.raises(BillingError) as refused:
        start_invoice_checkout(invoice, PAGE)

    assert refused.value.code == code
    assert not [r for r in stripe_api.requests if r[1] == "/v1/checkout/sessions"]


def test_without_stripe_configured_pay_says_so(settings: Any) -> None:
    settings.STRIPE_API_KEY = ""
    invoice = final_invoice()
    with pytest.raises(BillingError) as refused:
        start_invoice_checkout(invoice, PAGE)
    assert refused.value.code == "stripe_not_configured"
