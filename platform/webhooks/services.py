"""Writes: publish an event to every matching endpoint, once per event id; manage endpoints; replay."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import partial
from typing import Any, NamedTuple

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from accounts.access import Principal
from accounts.models import Tenant
from common.errors import ApiError

from .destinations import check_endpoint_url
from .models import WebhookDelivery, WebhookEndpoint, WebhookEvent
from .tasks import deliver_task


class Publication(NamedTuple):
    """One event to publish: its type, the tenant it concerns (None: platform-wide), body and id."""

    event_type: str
    tenant: Tenant | None
    payload: dict[str, Any]
    event_id: str


def _delivers_to(endpoint: WebhookEndpoint, event: WebhookEvent) -> bool:
    """Platform-wide endpoints and the event's own tenant's (never another's), subscribed to its type."""
    return endpoint.tenant_id in (None, event.tenant_id) and endpoint.subscribes_to(event.type)


def publish_event(
    event_type: str, tenant: Tenant | None, payload: dict[str, Any], event_id: str
) -> WebhookEvent:
    """Persist the event and queue one delivery per matching endpoint, sent after the transaction commits.

    Idempotent: publishing an `event_id` again returns the stored event and sends nothing new.
    """
    created = publish_events([Publication(event_type, tenant, payload, event_id)])
    return created[0] if created else WebhookEvent.objects.get(event_id=event_id)


def publish_events(publications: Sequence[Publication]) -> list[WebhookEvent]:
    """`publish_event` for many events in a few statements (an invoice run announces hundreds at once):
    one insert that skips the event ids stored already (also by a concurrent publisher), one read of
    the active endpoints of their tenants, one insert of the deliveries. Returns the events stored now,
    in the order given; an event id stored before (or twice in `publications`) sends nothing new."""
    first_of_each: dict[str, Publication] = {}
    for publication in publications:
        first_of_each.setdefault(publication.event_id, publication)
    unique = list(first_of_each.values())
    if not unique:
        return []
    with transaction.atomic():
        created = _insert_new_events(unique)
        tenant_ids = {e.tenant_id for e in created if e.tenant_id is not None}
        endpoints = list(
            WebhookEndpoint.objects.filter(Q(tenant__isnull=True) | Q(tenant_id__in=tenant_ids), active=True)
        )
        deliveries = WebhookDelivery.objects.bulk_create(
            WebhookDelivery(event=event, endpoint=endpoint)
            for event in created
            for endpoint in endpoints
            if _delivers_to(endpoint, event)
        )
        for delivery in deliveries:
            transaction.on_commit(partial(deliver_task.delay, delivery.pk))
    return created


def _insert_new_events(publications: list[Publication]) -> list[WebhookEvent]:
    """INSERT … ON CONFLICT (event_id) DO NOTHING RETURNING: only the rows this call stored come back,
    so a concurrent publisher of the same id never makes a second set of deliveries (Django's
    `bulk_create(ignore_conflicts=True)` does not say which rows it stored)."""
    table = WebhookEvent._meta.db_table
    now = timezone.now()
    rows = ", ".join(["(%s, %s, %s, %s::jsonb, %s)"] * len(publications))
    params: list[Any] = []
    for p in publications:
        params += [p.event_id, p.event_type, p.tenant.pk if p.tenant else None, json.dumps(p.payload), now]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (event_id, type, tenant_id, payload, created_at) VALUES {rows} "  # noqa: S608
            "ON CONFLICT (event_id) DO NOTHING RETURNING id, event_id",
            params,
        )
        stored = dict((event_id, pk) for pk, event_id in cursor.fetchall())
    return [
        WebhookEvent(
            pk=stored[p.event_id],
            event_id=p.event_id,
            type=p.event_type,
            tenant=p.tenant,
            payload=p.payload,
            created_at=now,
        )
        for p in publications
        if p.event_id in stored
    ]


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
