"""Reads: the endpoints a caller may see and their delivery logs."""

from __future__ import annotations

from django.db.models import QuerySet

from .models import WebhookDelivery, WebhookEndpoint


def visible_endpoints(tenant_id: int | None) -> QuerySet[WebhookEndpoint]:
    """Every endpoint for staff (None), else the tenant's own (never the platform-wide ones)."""
    endpoints = WebhookEndpoint.objects.select_related("tenant")
    return endpoints if tenant_id is None else endpoints.filter(tenant_id=tenant_id)


def visible_deliveries(tenant_id: int | None) -> QuerySet[WebhookDelivery]:
    """Deliveries to the endpoints the caller sees, with their attempts."""
    deliveries = WebhookDelivery.objects.select_related("event", "endpoint").prefetch_related("attempts")
    return deliveries if tenant_id is None else deliveries.filter(endpoint__tenant_id=tenant_id)
