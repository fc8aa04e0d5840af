"""Celery task: deliver one webhook, rescheduling itself with backoff while the delivery is pending."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from .delivery import attempt_delivery
from .models import WebhookDelivery


@shared_task(name="webhooks.deliver")
def deliver_task(delivery_id: int) -> str:
    """Try the delivery once; if it is still pending, enqueue the next try at its next_retry_at.

    Eager (embedded/tests) mode ignores the countdown, so the retries run at once.
    """
    delivery = attempt_delivery(delivery_id)
    if delivery.status == WebhookDelivery.Status.PENDING and delivery.next_retry_at is not None:
        countdown = max(0.0, (delivery.next_retry_at - timezone.now()).total_seconds())
        deliver_task.apply_async((delivery_id,), countdown=countdown)
    return str(delivery.status)
