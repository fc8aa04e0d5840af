"""Gap events from real ingest go out as platform-wide webhooks; the admin shows endpoints and the log."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from tests.factories import ContractFactory, TenantFactory, signing_agent
from tests.ledger.support import send
from tests.webhooks.conftest import Receiver
from webhooks.models import WebhookDelivery, WebhookEndpoint
from webhooks.services import publish_event
from webhooks.signing import verify_signature

pytestmark = pytest.mark.django_db


@pytest.mark.usefixtures("clickhouse")
def test_a_sequence_gap_from_ingest_is_delivered_signed(
    client: Client, receiver: Receiver, django_capture_on_commit_callbacks: Any
) -> None:
    contract = ContractFactory.create()
    platform = WebhookEndpoint.objects.create(url=receiver.url, event_types=["ledger.*"])
    WebhookEndpoint.objects.create(url=receiver.url, tenant=contract.tenant)  # tenant: no platform events
    agent = signing_agent(contract)
    with django_capture_on_commit_callbacks(execute=True):
        send(client, agent, [agent.record(contract, seq=s) for s in (0, 1)])
        send(client, agent, [agent.record(contract, seq=s) for s in (5, 6)])
    assert len(receiver.received) == 1
    headers, body = receiver.received[0]
    verify_signature(platform.secret, headers["Treemeter-Signature"], body, tolerance=60)
    sent = json.loads(body)
    assert (sent["type"], sent["tenant"], sent["data"]["first_missing"], sent["data"]["missing"]) == (
        "ledger.sequence_gap",
        None,
        2,
        3,
    )
    assert headers["Treemeter-Event-Id"] == sent["id"]


def test_admin_shows_the_secret_once_and_the_delivery_log(
    django_user_model: Any, receiver: Receiver, django_capture_on_commit_callbacks: Any
) -> None:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    tenant = TenantFactory.create()
    response = client.post(
        "/admin/webhooks/webhookendpoint/add/",
        {"tenant": tenant.pk, "url": receiver.url, "event_types": '["sla.alert.*"]', "active": "on"},
        follow=True,
    )
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.secret.startswith("whsec_") and endpoint.secret in response.content.decode()
    assert (
        endpoint.secret
        not in client.get(f"/admin/webhooks/webhookendpoint/{endpoint.pk}/change/").content.decode()
    )

    receiver.answers = [502]
    with django_capture_on_commit_callbacks(execute=True):
        publish_event("sla.alert.fired", tenant, {"rule": "page-1h"}, "evt-admin")
    delivery = WebhookDelivery.objects.get()
    page = client.get(f"/admin/webhooks/webhookdelivery/{delivery.pk}/change/").content.decode()
    assert list(delivery.attempts.values_list("number", "status_code")) == [(1, 502), (2, 200)]
    assert "502" in page and "boom" in page  # the attempt log is on the delivery page
    for model in ("webhookendpoint", "webhookevent", "webhookdelivery"):
        assert client.get(f"/admin/webhooks/{model}/").status_code == 200, model
