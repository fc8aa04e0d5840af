"""Writes: publish an event to every matching endpoint, once per event id."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import Q

from accounts.models import Tenant

from .models import WebhookDelivery, WebhookEndpoint, WebhookEvent
from .tasks import deliver_task


def matching_endpoints(event_type: str, tenant: Tenant | None) -> list[WebhookEndpoint]:
    """Active endpoints for the event: platform-wide ones, and the event's own tenant's (never another's)."""
    scope = Q(tenant__isnull=True) | Q(tenant=tenant) if tenant is not None else Q(tenant__isnull=True)
    endpoints = WebhookEndpoint.objects.filter(scope, active=True)
    return [endpoint for endpoint in endpoints if endpoint.subscribes_to(event_type)]


def publish_event(
    event_type: str, tenant: Tenant | None, payload: dict[str, Any], event_id: str
) -> WebhookEvent:
    """Persist the event and queue one delivery per matching endpoint, sent after the transaction commits.

    Idempotent: publishing an `event_id` again returns the stored event and sends nothing new.
    """
    with transaction.atomic():
        event, created = WebhookEvent.objects.get_or_create(
            event_id=event_id, defaults={"type": event_type, "tenant": tenant, "payload": payload}
        )
        if not created:
            return event
        deliveries = WebhookDelivery.objects.bulk_create(
            WebhookDelivery(event=event, endpoint=endpoint)
            for endpoint in matching_endpoints(event_type, tenant)
        )
        for delivery in deliveries:
            transaction.on_commit(partial(deliver_task.delay, delivery.pk))
    return event
