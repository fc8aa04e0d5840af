"""Writes: publish an event to every matching endpoint, once per event id; manage endpoints; replay."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import Q

from accounts.access import Principal
from accounts.models import Tenant
from config.errors import ApiError

from .destinations import check_endpoint_url
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


class EndpointError(ApiError):
    http_status = 400


class DeliveryNotReplayable(ApiError):
    http_status = 409


def _check_patterns(event_types: list[str]) -> list[str]:
    if any(not isinstance(p, str) or not p.strip() or len(p) > 100 for p in event_types):
        raise EndpointError(
            "invalid_event_types", "event_types lists event type patterns such as 'invoice.*'.", {}
        )
    return [p.strip() for p in event_types]


def create_endpoint(principal: Principal, *, url: str, event_types: list[str]) -> WebhookEndpoint:
    """A new endpoint for the principal's tenant (staff: a platform-wide one); its secret is new."""
    check_endpoint_url(url)
    return WebhookEndpoint.objects.create(
        tenant=principal.tenant, url=url, event_types=_check_patterns(event_types)
    )


def update_endpoint(endpoint: WebhookEndpoint, changes: dict[str, Any]) -> WebhookEndpoint:
    """Change the URL, the event type patterns or `active`; the secret stays."""
    if "url" in changes:
        check_endpoint_url(changes["url"])
    if "event_types" in changes:
        changes = {**changes, "event_types": _check_patterns(changes["event_types"])}
    for name, value in changes.items():
        setattr(endpoint, name, value)
    endpoint.save(update_fields=list(changes))
    return endpoint


def replay_delivery(delivery: WebhookDelivery) -> WebhookDelivery:
    """Send a delivery again, now, whatever became of it: it goes back to pending and its next attempt
    (numbered after the ones logged) is queued after commit. The body is the same as on every attempt."""
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update(of=("self",))
            .select_related("endpoint")
            .get(pk=delivery.pk)
        )
        if not delivery.endpoint.active:
            raise DeliveryNotReplayable(
                "endpoint_inactive", "The endpoint is inactive; activate it to replay.", {}
            )
        delivery.status, delivery.next_retry_at = WebhookDelivery.Status.PENDING, None
        delivery.save(update_fields=["status", "next_retry_at"])
        transaction.on_commit(partial(deliver_task.delay, delivery.pk))
    return delivery
