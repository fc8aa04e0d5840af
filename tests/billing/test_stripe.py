"""Stripe against a local fake of its HTTP API, with real webhook signatures."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
import stripe
from celery.exceptions import Retry
from django.test import Client

from billing.models import Invoice, StripePayment
from billing.services import generate_invoice
from billing.tasks import push_invoice_task
from common.periods import month_bounds
from contracts.models import ContractPrice
from tests.billing.fake_stripe import SECRET, FakeStripe, signed
from tests.factories import ContractFactory

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]


def final_invoice(currency: str = "CNY", fee: str = "1234.56") -> Invoice:
    contract = ContractFactory.create(currency=currency, base_fee=Decimal(fee))
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=Decimal("1"))
    return generate_invoice(contract.pk, *month_bounds("2026-11"), now=datetime(2026, 12, 2, tzinfo=UTC))


def post_event(client: Client, event: dict[str, Any], signature: Callable[[bytes], str] | None = None) -> Any:
    payload = json.dumps(event).encode()
    header = (signature or (lambda p: signed(p, SECRET)))(payload)
    return client.post(
        "/v1/stripe/webhook", data=payload, content_type="application/json", HTTP_STRIPE_SIGNATURE=header
    )


def intent_event(event_id: str, kind: str, intent_id: str) -> dict[str, Any]:
    obj: dict[str, Any] = {"id": intent_id, "object": "payment_intent"}
    if kind == "payment_intent.payment_failed":
        obj["last_payment_error"] = {"message": "Your card was declined."}
    return {"id": event_id, "object": "event", "type": kind, "data": {"object": obj}}


def test_a_finalised_invoice_is_pushed_once_as_a_payment_intent(
    stripe_api: FakeStripe, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        invoice = final_invoice()  # finalising schedules the push after commit

    payment = StripePayment.objects.get(invoice=invoice)
    assert (payment.status, payment.attempts, payment.payment_intent_id) == ("pushed", 1, "pi_2")
    assert payment.amount == Decimal("1234.56")
    intent = stripe_api.objects["pi_2"]
    assert (intent["amount"], intent["currency"], intent["customer"]) == (123456, "cny", "cus_1")
    assert intent["metadata"] == {"invoice": invoice.number, "invoice_id": str(invoice.pk)}
    assert push_invoice_task.delay(invoice.pk).get() == "pi_2"  # pushed already: no new request
    assert [r[1] for r in stripe_api.requests] == ["/v1/customers", "/v1/payment_intents"]
    assert stripe_api.requests[1][3] == f"invoice-treemeter-{invoice.number}"


def test_jpy_amounts_have_no_minor_unit(stripe_api: FakeStripe) -> None:
    invoice = final_invoice("JPY", "5000")
    push_invoice_task.delay(invoice.pk).get()
    assert stripe_api.objects[StripePayment.objects.get().payment_intent_id]["amount"] == 5000


def test_transient_failures_retry_with_backoff_and_the_same_idempotency_key(stripe_api: FakeStripe) -> None:
    invoice = final_invoice()
    stripe_api.fail_next = 2  # the first two requests answer 500
    countdowns = []
    for retries in (0, 1):  # what the worker would run 2 s, then 4 s later
        with pytest.raises(Retry) as raised:
            push_invoice_task.apply(args=[invoice.pk], retries=retries, throw=True)
        countdowns.append(raised.value.when)
        payment = StripePayment.objects.get(invoice=invoice)
        assert (payment.attempts, payment.status) == (retries + 1, "pending")
        assert payment.last_error == "APIError: fake outage"

    assert push_invoice_task.apply(args=[invoice.pk], retries=2).get() == "pi_2"

    assert countdowns == [2, 4]
    payment = StripePayment.objects.get(invoice=invoice)
    assert (payment.attempts, payment.status, payment.last_error) == (3, "pushed", "")
    assert [r[3] for r in stripe_api.requests] == ["customer-" + invoice.tenant.code] * 3 + [
        f"invoice-treemeter-{invoice.number}"
    ]


def test_a_push_that_keeps_failing_is_marked_and_shows_the_error(stripe_api: FakeStripe) -> None:
    invoice = final_invoice()
    stripe_api.fail_next = 100
    with pytest.raises(stripe.APIError, match="fake outage"):
        push_invoice_task.apply(args=[invoice.pk], retries=8, throw=True)  # the last allowed retry
    payment = StripePayment.objects.get(invoice=invoice)
    assert (payment.status, payment.attempts, payment.last_error) == ("error", 1, "APIError: fake outage")


def test_the_webhook_marks_paid_once_per_event_id(stripe_api: FakeStripe, client: Client) -> None:
    invoice = final_invoice()
    intent_id = push_invoice_task.delay(invoice.pk).get()
    event = intent_event("evt_1", "payment_intent.succeeded", intent_id)

    first = post_event(client, event)
    again = post_event(client, event)

    assert (first.status_code, first.json()["duplicate"]) == (200, False)
    assert (again.status_code, again.json()["duplicate"]) == (200, True)
    invoice.refresh_from_db()
    assert invoice.status == "paid" and invoice.paid_at is not None
    assert StripePayment.objects.get(invoice=invoice).status == "succeeded"


def test_a_failed_payment_is_visible_and_the_invoice_stays_open(
    stripe_api: FakeStripe, client: Client
) -> None:
    invoice = final_invoice()
    intent_id = push_invoice_task.delay(invoice.pk).get()
    response = post_event(client, intent_event("evt_2", "payment_intent.payment_failed", intent_id))
    assert response.status_code == 200
    payment = StripePayment.objects.get(invoice=invoice)
    assert (payment.status, payment.last_error) == ("failed", "Your card was declined.")
    invoice.refresh_from_db()
    assert invoice.status == "finalized"


@pytest.mark.parametrize(
    "signature",
    [
        lambda p: signed(p, "whsec_someone_else"),
        lambda p: signed(p, SECRET, timestamp=1_000_000_000),  # replayed from 2001: outside the tolerance
        lambda p: "t=1,v1=deadbeef",
        lambda p: "",
    ],
)
def test_bad_signatures_are_refused(
    stripe_api: FakeStripe, client: Client, signature: Callable[[bytes], str]
) -> None:
    invoice = final_invoice()
    intent_id = push_invoice_task.delay(invoice.pk).get()
    response = post_event(client, intent_event("evt_3", "payment_intent.succeeded", intent_id), signature)
    assert (response.status_code, response.json()["code"]) == (400, "invalid_signature")
    invoice.refresh_from_db()
    assert invoice.status == "finalized"
