"""invoice.paid, invoice.finalized, dispute.updated: what reaches a tenant's real HTTP endpoint, signed,
and each published once per event id."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import Tenant
from billing.disputes import open_dispute, resolve_dispute
from billing.models import Invoice
from billing.services import generate_invoice
from billing.tasks import push_invoice_task
from billing.webhook_events import publish_dispute_updated, publish_invoice_event
from common.periods import month_bounds
from contracts.models import Contract, ContractPrice
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from tests.billing.fake_stripe import FakeStripe, fake_stripe, signed
from tests.billing.usage import at, forget_agents, send
from tests.factories import ContractFactory, TenantFactory, customer
from tests.webhooks.conftest import Receiver
from webhooks.models import WebhookEndpoint, WebhookEvent
from webhooks.signing import verify_signature

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]
STRIPE_SECRET = "whsec_events"


@pytest.fixture
def stripe_api(settings: Any) -> Iterator[FakeStripe]:
    forget_agents()
    with fake_stripe() as fake:
        settings.STRIPE_API_KEY = "sk_test_fake"
        settings.STRIPE_API_BASE = fake.url
        settings.STRIPE_WEBHOOK_SECRET = STRIPE_SECRET
        yield fake
    forget_agents()


def november_invoice() -> Invoice:
    tenant = Tenant.objects.filter(code="acme").first() or TenantFactory.create(code="acme")
    contract = ContractFactory.create(code="acme-main", tenant=tenant)
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=Decimal("0.50"))
    send(contract, 4, at(2026, 11, 4))
    return generate_invoice(contract.pk, *month_bounds("2026-11"), now=datetime(2026, 12, 2, tzinfo=UTC))


def received(receiver: Receiver, endpoint: WebhookEndpoint) -> list[dict[str, Any]]:
    events = []
    for headers, body in receiver.received:
        verify_signature(endpoint.secret, headers["Treemeter-Signature"], body)
        events.append(json.loads(body))
    return events


def test_a_paid_payment_intent_publishes_invoice_paid_once(
    stripe_api: FakeStripe, receiver: Receiver, django_capture_on_commit_callbacks: Any
) -> None:
    invoice = november_invoice()
    endpoint = WebhookEndpoint.objects.create(
        tenant=invoice.tenant, url=receiver.url, event_types=["invoice.*"]
    )
    intent_id = push_invoice_task.delay(invoice.pk).get()
    event = {
        "id": "evt_pi_1",
        "object": "event",
        "type": "payment_intent.succeeded",
        "data": {"object": {"id": intent_id, "object": "payment_intent"}},
    }
    payload = json.dumps(event).encode()
    for _ in range(2):  # Stripe redelivers
        with django_capture_on_commit_callbacks(execute=True):
            Client().post(
                "/v1/stripe/webhook",
                data=payload,
                content_type="application/json",
                HTTP_STRIPE_SIGNATURE=signed(payload, STRIPE_SECRET),
            )

    [sent] = received(receiver, endpoint)
    assert (sent["id"], sent["type"], sent["tenant"]) == (
        f"invoice.paid:{invoice.pk}",
        "invoice.paid",
        "acme",
    )
    assert sent["data"] == {
        "invoice": invoice.pk,
        "number": invoice.number,
        "contract": "acme-main",
        "status": "paid",
        "period_start": "2026-11-01T00:00:00+00:00",
        "period_end": "2026-12-01T00:00:00+00:00",
        "currency": "CNY",
        "total": "2.00",
        "credit_notes": "0.00",
        "amount_due": "2.00",
    }


def test_invoice_finalized_goes_to_the_invoices_tenant_only(
    receiver: Receiver, django_capture_on_commit_callbacks: Any
) -> None:
    forget_agents()
    mine = WebhookEndpoint.objects.create(tenant=TenantFactory.create(code="acme"), url=receiver.url)
    WebhookEndpoint.objects.create(tenant=TenantFactory.create(), url=receiver.url + "/other")
    with django_capture_on_commit_callbacks(execute=True):
        invoice = november_invoice()  # finalising publishes the event
        publish_invoice_event("invoice.finalized", invoice)  # again: the same event id, nothing new

    [sent] = received(receiver, mine)
    assert (sent["type"], sent["data"]["status"], sent["data"]["number"]) == (
        "invoice.finalized",
        "finalized",
        "TREEMETER-000001",
    )
    assert WebhookEvent.objects.filter(type="invoice.finalized").count() == 1


def test_dispute_updated_on_opening_and_resolution(
    receiver: Receiver, django_capture_on_commit_callbacks: Any
) -> None:
    forget_agents()
    invoice = november_invoice()
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    endpoint = WebhookEndpoint.objects.create(
        tenant=invoice.tenant, url=receiver.url, event_types=["dispute.*"]
    )
    line = invoice.lines.get(dimension="requests")
    staff = get_user_model().objects.create_user("finance", is_staff=True)
    with django_capture_on_commit_callbacks(execute=True):
        dispute = open_dispute(None, line.pk, "We sent 3 requests", customer("acme"))
        publish_dispute_updated(dispute, "opened")
        dispute = resolve_dispute(staff, dispute.pk, "accept", "One was a retry", amount=Decimal("0.50"))
        publish_dispute_updated(dispute, "accepted")

    assert [
        (e["type"], e["data"]["action"], e["data"]["status"], e["data"]["credited"])
        for e in received(receiver, endpoint)
    ] == [
        ("dispute.updated", "opened", "open", "0.00"),
        ("dispute.updated", "accepted", "accepted", "0.50"),
    ]
    assert Contract.objects.get().code == "acme-main"
