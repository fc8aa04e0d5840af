"""Celery tasks: the scheduled checkpoint (beat entry ``ledger-checkpoint`` in settings) and on demand."""

from __future__ import annotations

from datetime import UTC, datetime

from celery import shared_task
from django.conf import settings

from .audit import audit_recent
from .models import Checkpoint
from .services import publish_checkpoint


@shared_task(name="ledger.publish_checkpoint")
def publish_checkpoint_task(reason: str = Checkpoint.Reason.SCHEDULE, invoice_id: int | None = None) -> int:
    """Publish a checkpoint; returns its tree size. A refused (inconsistent) tree raises and is logged."""
    return publish_checkpoint(reason, invoice_id).size


@shared_task(name="ledger.audit_store")
def audit_store_task() -> int:
    """Compare the recent records in ClickHouse with the log; returns how many findings were published."""
    return len(audit_recent(datetime.now(UTC), settings.LEDGER_AUDIT_WINDOW_HOURS))
