"""Celery tasks of ingest: the outbox drain (beat entry ``ingest-store-pending`` in settings)."""

from __future__ import annotations

from celery import shared_task

from .outbox import store_pending


@shared_task(name="ingest.store_pending")
def store_pending_task() -> int:
    """Insert committed batches that are not in ClickHouse yet; returns how many were stored."""
    return store_pending()
