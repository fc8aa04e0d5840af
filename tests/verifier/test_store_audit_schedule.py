"""The scheduled store audit finds records changed, deleted or inserted behind the log's back, and
publishes each finding once as a `ledger.store_mismatch` webhook event."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client

from ingest.audit import EVENT, audit_window
from tests.ledger.support import NOV
from tests.verifier.test_verifier_tamper import change_one_byte, ingest_world, insert_record
from webhooks.models import WebhookDelivery, WebhookEndpoint, WebhookEvent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


def test_beat_runs_the_store_audit_hourly() -> None:
    assert settings.CELERY_BEAT_SCHEDULE["ledger-audit-store"] == {
        "task": "ledger.audit_store",
        "schedule": 3600.0,
    }


def test_tampering_is_found_and_published_once_to_the_tenant_and_the_platform(client: Client) -> None:
    world = ingest_world(client)
    tenant = world.contract.tenant
    WebhookEndpoint.objects.create(tenant=tenant, url="http://127.0.0.1:9/tenant", event_types=["ledger.*"])
    WebhookEndpoint.objects.create(tenant=None, url="http://127.0.0.1:9/platform")
    assert audit_window(*NOV) == []

    change_one_byte(world)
    insert_record(world)
    findings = audit_window(*NOV)
    assert sorted((f.contract, f.kind, len(f.record_ids)) for f in findings) == [
        (world.contract.code, "changed", 1),
        (world.contract.code, "unlogged", 1),
    ]
    events = WebhookEvent.objects.filter(type=EVENT).order_by("payload__kind")
    assert [(e.tenant_id, e.payload["kind"], e.payload["count"]) for e in events] == [
        (tenant.pk, "changed", 1),
        (tenant.pk, "unlogged", 1),
    ]
    assert WebhookDelivery.objects.filter(event__type=EVENT).count() == 4  # 2 events × 2 endpoints

    audit_window(*NOV)  # the same findings again: nothing new is published
    assert WebhookEvent.objects.filter(type=EVENT).count() == 2
