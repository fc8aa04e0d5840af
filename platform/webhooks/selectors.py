"""Reads: the endpoints a caller may see and their delivery logs."""

from __future__ import annotations

from django.db.models import QuerySet

from accounts.access import Principal, scoped

from .models import WebhookDelivery, WebhookEndpoint


def visible_endpoints(principal: Principal) -> QuerySet[WebhookEndpoint]:
    """The endpoints the principal sees (a customer never sees the platform-wide ones)."""
    return scoped(WebhookEndpoint.objects.select_related("tenant"), principal)


def visible_deliveries(principal: Principal) -> QuerySet[WebhookDelivery]:
    """Deliveries to the endpoints the principal sees, with their attempts."""
    deliveries = WebhookDelivery.objects.select_related("event", "endpoint").prefetch_related("attempts")
    return scoped(deliveries, principal, "endpoint__tenant")
