"""The invoice page's Pay action: a button for the amount due that goes to Stripe Checkout, for members
who may pay and only on their own tenant's invoices; a plain line where online payment is not set up."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from accounts.models import Role
from billing.models import Invoice, StripePayment
from tests.billing.fake_stripe import SECRET, FakeStripe, fake_stripe, signed
from tests.factories import TenantFactory
from tests.frontend.support import member, november_invoice, priced_contract

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


@pytest.fixture
def stripe_api(settings: Any) -> Iterator[FakeStripe]:
    with fake_stripe() as fake:
        settings.STRIPE_API_KEY, settings.STRIPE_API_BASE = "sk_test_fake", fake.url
        settings.STRIPE_WEBHOOK_SECRET = SECRET
        yield fake


def due_invoice() -> Invoice:
    invoice = november_invoice(priced_contract(), records=40)  # 30 billable requests beyond the 10 included
    assert invoice.amount_due > 0 and invoice.payment_status in ("due", "overdue")
    return invoice


def test_pay_goes_to_checkout_and_the_paid_session_shows_paid(stripe_api: FakeStripe) -> None:
    invoice = due_invoice()
    owner = member(invoice.tenant, Role.OWNER)
    page = owner.get(f"/invoices/{invoice.pk}").content.decode()
    assert 'data-testid="invoice-pay"' in page and f"Pay CNY {invoice.amount_due}" in page

    answer = owner.post(f"/invoices/{invoice.pk}/pay")

    session = StripePayment.objects.get(invoice=invoice).checkout_session_id
    assert (answer.status_code, answer["Location"]) == (302, f"{stripe_api.url}/pay/{session}")
    assert (
        stripe_api.objects[session]["success_url"]
        == f"http://testserver/invoices/{invoice.pk}?payment=success"
    )
    payload = json.dumps(stripe_api.pay_checkout(session, "evt_paid")).encode()
    webhook = Client().post(
        "/v1/stripe/webhook",
        data=payload,
        content_type="application/json",
        HTTP_STRIPE_SIGNATURE=signed(payload, SECRET),
    )
    assert webhook.status_code == 200
    back = owner.get(f"/invoices/{invoice.pk}?payment=success").content.decode()
    assert "Stripe is confirming your payment" in back
    assert 'data-testid="invoice-pay"' not in back
    assert "Paid" in back.split('data-testid="invoice-status">')[1][:20]


def test_a_paid_invoice_offers_no_pay_and_refuses_it_with_the_reason(stripe_api: FakeStripe) -> None:
    invoice = due_invoice()
    Invoice.objects.filter(pk=invoice.pk).update(status=Invoice.Status.PAID)
    owner = member(invoice.tenant, Role.OWNER)
    assert 'data-testid="invoice-pay"' not in owner.get(f"/invoices/{invoice.pk}").content.decode()

    answer = owner.post(f"/invoices/{invoice.pk}/pay", follow=True)

    assert answer.redirect_chain == [(f"/invoices/{invoice.pk}", 302)]
    assert f"Invoice {invoice.number} is already paid." in answer.content.decode()
    assert not stripe_api.requests


def test_only_members_who_may_pay_their_own_invoices_can(stripe_api: FakeStripe) -> None:
    invoice = due_invoice()
    reader = member(invoice.tenant, Role.DEVELOPER)
    assert 'data-testid="invoice-pay"' not in reader.get(f"/invoices/{invoice.pk}").content.decode()
    assert reader.post(f"/invoices/{invoice.pk}/pay").status_code == 403
    stranger = member(TenantFactory.create(), Role.OWNER)
    assert stranger.post(f"/invoices/{invoice.pk}/pay").status_code == 404
    assert member(invoice.tenant).get(f"/invoices/{invoice.pk}/pay").status_code == 405
    assert not stripe_api.requests


def test_without_online_payment_the_page_says_how_to_pay(settings: Any) -> None:
    settings.STRIPE_API_KEY = ""
    invoice = due_invoice()
    page = member(invoice.tenant).get(f"/invoices/{invoice.pk}").content.decode()
    assert 'data-testid="invoice-pay"' not in page
    assert "Online payment is not set up: pay by bank transfer within the payment terms." in page
