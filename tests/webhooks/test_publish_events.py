"""Publishing many events at once: each event id stored once, deliveries only to the endpoints that match
(platform-wide ones and the event's own tenant's, by event type), none for an id stored before, and
none twice when two publishers race on the same ids. Real PostgreSQL."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection

from tests.factories import TenantFactory
from webhooks.models import WebhookDelivery, WebhookEndpoint, WebhookEvent
from webhooks.services import Publication, publish_event, publish_events

pytestmark = pytest.mark.django_db


def deliveries() -> set[tuple[str, str]]:
    return set(WebhookDelivery.objects.values_list("event__event_id", "endpoint__url"))


def test_many_events_reach_exactly_the_matching_endpoints(django_capture_on_commit_callbacks: Any) -> None:
    acme, globex = TenantFactory.create(), TenantFactory.create()
    WebhookEndpoint.objects.create(tenant=acme, url="https://acme.example/all", event_types=[])
    WebhookEndpoint.objects.create(tenant=acme, url="https://acme.example/paid", event_types=["invoice.paid"])
    WebhookEndpoint.objects.create(tenant=globex, url="https://globex.example/inv", event_types=["invoice.*"])
    WebhookEndpoint.objects.create(tenant=None, url="https://ops.example/final", event_types=["*.finalized"])
    WebhookEndpoint.objects.create(tenant=acme, url="https://acme.example/off", event_types=[], active=False)
    publish_event("invoice.finalized", acme, {"invoice": 1}, "invoice.finalized:1")  # stored before

    with django_capture_on_commit_callbacks() as callbacks:
        created = publish_events(
            [
                Publication("invoice.finalized", acme, {"invoice": 1}, "invoice.finalized:1"),
                Publication("invoice.finalized", acme, {"invoice": 2}, "invoice.finalized:2"),
                Publication("invoice.finalized", globex, {"invoice": 3}, "invoice.finalized:3"),
                Publication("invoice.paid", acme, {"invoice": 2}, "invoice.paid:2"),
                Publication("invoice.paid", acme, {"invoice": 2, "again": True}, "invoice.paid:2"),
                Publication("ledger.gap", None, {"agent": "a"}, "ledger.gap:a:1"),
            ]
        )

    assert [(e.event_id, e.type, e.tenant_id, e.payload) for e in created] == [
        ("invoice.finalized:2", "invoice.finalized", acme.pk, {"invoice": 2}),
        ("invoice.finalized:3", "invoice.finalized", globex.pk, {"invoice": 3}),
        ("invoice.paid:2", "invoice.paid", acme.pk, {"invoice": 2}),  # the first of a repeated id
        ("ledger.gap:a:1", "ledger.gap", None, {"agent": "a"}),
    ]
    stored = {e.event_id: e for e in WebhookEvent.objects.all()}
    assert {e.event_id: e.pk for e in created} == {
        k: stored[k].pk for k in stored if k != "invoice.finalized:1"
    }
    assert stored["invoice.paid:2"].payload == {"invoice": 2}
    assert deliveries() == {
        ("invoice.finalized:1", "https://acme.example/all"),  # from the first publication only
        ("invoice.finalized:1", "https://ops.example/final"),
        ("invoice.finalized:2", "https://acme.example/all"),
        ("invoice.finalized:2", "https://ops.example/final"),
        ("invoice.finalized:3", "https://globex.example/inv"),
        ("invoice.finalized:3", "https://ops.example/final"),
        ("invoice.paid:2", "https://acme.example/all"),
        ("invoice.paid:2", "https://acme.example/paid"),
    }
    assert len(callbacks) == 6  # one delivery task per new delivery, after commit
    assert publish_events([]) == []


@pytest.mark.django_db(transaction=True)
def test_two_publishers_racing_on_the_same_ids_deliver_each_event_once() -> None:
    tenant = TenantFactory.create()
    WebhookEndpoint.objects.create(tenant=tenant, url="http://127.0.0.1:9/hook", event_types=[])
    batch = [
        Publication("invoice.finalized", tenant, {"invoice": n}, f"invoice.finalized:{n}") for n in range(50)
    ]

    def publish(_: int) -> int:
        try:
            return len(publish_events(batch))
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=4) as pool:
        stored_by = list(pool.map(publish, range(4)))

    assert sum(stored_by) == 50
    assert WebhookEvent.objects.count() == 50
    assert WebhookDelivery.objects.count() == 50
