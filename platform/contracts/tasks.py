"""Periodic contract tasks."""

from __future__ import annotations

from celery import shared_task

from .services import publish_exhausted_quotas


@shared_task(name="contracts.publish_exhausted_quotas")
def publish_exhausted_quotas_task() -> int:
    """`quota.exhausted` events for quotas used up this month (idempotent; beat runs it every 5 min)."""
    return publish_exhausted_quotas()
