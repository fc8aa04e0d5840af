"""Outgoing webhooks: endpoints, the events published to them, and a delivery log per attempt.

Modelled on Saleor's EventDelivery/EventDeliveryAttempt: one WebhookDelivery per (event, endpoint),
one WebhookDeliveryAttempt per HTTP try, kept for the admin and the portal.
"""

from __future__ import annotations

import fnmatch
import secrets

from django.db import models

from accounts.models import Tenant


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


class WebhookEndpoint(models.Model):
    """A URL that receives signed events: a tenant's own, or platform-wide (tenant empty) for staff."""

    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="webhook_endpoints",
        help_text="Empty: platform-wide, receives every tenant's events and platform events.",
    )
    url = models.URLField(max_length=500)
    secret = models.CharField(max_length=100, default=new_secret, editable=False)
    event_types = models.JSONField(
        default=list,
        blank=True,
        help_text='Event type patterns, e.g. ["sla.alert.*"]; empty: every type.',
    )
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.tenant.code if self.tenant else '*'} → {self.url}"

    def subscribes_to(self, event_type: str) -> bool:
        return not self.event_types or any(fnmatch.fnmatchcase(event_type, p) for p in self.event_types)


class WebhookEvent(models.Model):
    """One published event; `event_id` makes publishing idempotent."""

    event_id = models.CharField(max_length=200, unique=True)
    type = models.CharField(max_length=64)
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="webhook_events"
    )
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.type} {self.event_id}"


class WebhookDelivery(models.Model):
    """An event on its way to one endpoint."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"

    event = models.ForeignKey(WebhookEvent, on_delete=models.CASCADE, related_name="deliveries")
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    next_retry_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.UniqueConstraint(fields=["event", "endpoint"], name="webhooks_one_delivery_per_endpoint")
        ]

    def __str__(self) -> str:
        return f"{self.event} → {self.endpoint.url} ({self.status})"


class WebhookDeliveryAttempt(models.Model):
    """One HTTP try of a delivery, as the receiver answered it."""

    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    attempted_at = models.DateTimeField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    response_snippet = models.TextField(blank=True)
    error = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField()
    next_retry_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="webhooks_attempt_number_unique")
        ]

    def __str__(self) -> str:
        return f"{self.delivery_id} #{self.number}: {self.status_code or self.error}"
