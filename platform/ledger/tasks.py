"""Celery tasks: the scheduled checkpoint (beat entry ``ledger-checkpoint`` in settings) and on demand.
The store audit (``ledger.audit_store``) is ingest's: ingest.tasks."""

from __future__ import annotations

from celery import shared_task

from .models import Checkpoint
from .services import publish_checkpoint


@shared_task(name="ledger.publish_checkpoint")
def publish_checkpoint_task(reason: str = Checkpoint.Reason.SCHEDULE, invoice_id: int | None = None) -> int:
    """Publish a checkpoint; returns its tree size. A refused (inconsistent) tree raises and is logged."""
    return publish_checkpoint(reason, invoice_id).size
