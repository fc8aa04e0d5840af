"""The traffic simulator's beat job: every open sandbox's events due, through the serving path."""

from __future__ import annotations

import logging

import httpx
from celery import shared_task
from django.conf import settings
from django.utils import timezone

from .models import Sandbox
from .simulator import simulate

log = logging.getLogger(__name__)


@shared_task(name="sandbox.simulate_traffic")
def simulate_traffic() -> int:
    """Send each sandbox's events due; returns how many events were sent. Without a serving path
    (`SANDBOX_SERVING_URL`) nothing is sent; a path that does not answer leaves the events due for the
    next run (at most a day's worth)."""
    url = settings.SANDBOX_SERVING_URL
    if not url:
        return 0
    sent = 0
    now = timezone.now()
    with httpx.Client(base_url=url, timeout=60) as client:
        for sandbox in Sandbox.objects.filter(daily_events__gt=0).select_related("tenant"):
            try:
                result = simulate(sandbox, client, now)
            except httpx.HTTPError as error:
                log.warning("sandbox %s: the serving path failed: %s", sandbox.tenant.code, error)
                continue
            sent += result.events
            log.info("sandbox %s: %d events, answers %s", sandbox.tenant.code, result.events, result.statuses)
    return sent
