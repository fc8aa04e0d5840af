"""One HTTP try of a delivery: sign, POST, record the attempt, and decide whether to retry."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from .destinations import UnresolvableHost, UnsafeDestination, resolve_destination
from .models import WebhookDelivery, WebhookDeliveryAttempt, WebhookEvent
from .signing import EVENT_ID_HEADER, SIGNATURE_HEADER, sign

SNIPPET_CHARS = 500


def event_body(event: WebhookEvent) -> bytes:
    """The JSON body sent for `event`: identical on every attempt and to every endpoint."""
    envelope = {
        "id": event.event_id,
        "type": event.type,
        "tenant": event.tenant.code if event.tenant else None,
        "created": event.created_at.isoformat(),
        "data": event.payload,
    }
    return json.dumps(envelope, sort_keys=True, separators=(",", ":")).encode()


def retry_delay(attempt_number: int) -> timedelta:
    """Exponential backoff after the n-th failed attempt: base, 2 × base, 4 × base, …"""
    return timedelta(seconds=settings.WEBHOOK_RETRY_BASE_SECONDS * 2 ** (attempt_number - 1))


def attempt_delivery(delivery_id: int) -> WebhookDelivery:
    """Try a pending delivery once and log the attempt; a finished one is left as it is.

    The row is locked for the try, so a redelivered task cannot send the same attempt twice.
    Network errors and 5xx answers are retried until WEBHOOK_MAX_ATTEMPTS; other non-2xx answers, and
    a URL that resolves to a non-public address (webhooks.destinations), fail at once.
    """
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update(of=("self",))
            .select_related("event__tenant", "endpoint")
            .get(pk=delivery_id)
        )
        if delivery.status != WebhookDelivery.Status.PENDING:
            return delivery
        number = delivery.attempts.count() + 1
        body = event_body(delivery.event)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "Treemeter-Webhooks/1",
            SIGNATURE_HEADER: sign(delivery.endpoint.secret, body),
            EVENT_ID_HEADER: delivery.event.event_id,
        }
        started, attempted_at = time.monotonic(), timezone.now()
        status_code, snippet, error, retryable = None, "", "", True
        try:
            destination = resolve_destination(delivery.endpoint.url)
            with httpx.Client(timeout=settings.WEBHOOK_TIMEOUT_SECONDS) as http:
                response = http.post(
                    destination.url,
                    content=body,
                    headers={**headers, "Host": destination.host_header},
                    extensions={"sni_hostname": destination.host},
                )
            status_code, snippet = response.status_code, response.text[:SNIPPET_CHARS]
            retryable = status_code >= 500
        except UnresolvableHost as exc:
            error = exc.message[:SNIPPET_CHARS]
        except UnsafeDestination as exc:
            error, retryable = f"refused: {exc.message}"[:SNIPPET_CHARS], False
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:SNIPPET_CHARS]
        duration_ms = int((time.monotonic() - started) * 1000)
        if status_code is not None and 200 <= status_code < 300:
            delivery.status, delivery.next_retry_at = WebhookDelivery.Status.SUCCEEDED, None
        elif retryable and number < settings.WEBHOOK_MAX_ATTEMPTS:
            delivery.next_retry_at = timezone.now() + retry_delay(number)
        else:
            delivery.status, delivery.next_retry_at = WebhookDelivery.Status.FAILED, None
        WebhookDeliveryAttempt.objects.create(
            delivery=delivery,
            number=number,
            attempted_at=attempted_at,
            status_code=status_code,
            response_snippet=snippet,
            error=error,
            duration_ms=duration_ms,
            next_retry_at=delivery.next_retry_at,
        )
        delivery.save(update_fields=["status", "next_retry_at"])
    return delivery
