"""Celery tasks of ingest: the outbox drain (beat entry ``ingest-store-pending`` in settings) and the
store audit (``ledger-audit-store``; the task keeps its name ``ledger.audit_store``)."""

from __future__ import annotations

from datetime import UTC, datetime

from celery import shared_task
from django.conf import settings

from .audit import audit_recent
from .outbox import store_pending


@shared_task(name="ingest.store_pending")
def store_pending_task() -> int:
    """Insert committed batches that are not in ClickHouse yet; returns how many were stored."""
    return store_pending()


@shared_task(name="ledger.audit_store")
def audit_store_task() -> int:
    """Compare the recent records in ClickHouse with the log; returns how many findings were published."""
    return len(audit_recent(datetime.now(UTC), settings.LEDGER_AUDIT_WINDOW_HOURS))
