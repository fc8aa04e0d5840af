"""A checkpoint is published whenever an invoice is created (after its transaction commits)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models.signals import post_save
from django.dispatch import receiver

from billing.models import Invoice

from .models import Checkpoint
from .tasks import publish_checkpoint_task


@receiver(post_save, sender=Invoice, dispatch_uid="ledger-checkpoint-on-invoice")
def checkpoint_on_invoice(sender: type[Invoice], instance: Invoice, created: bool, **kwargs: Any) -> None:
    if created:
        invoice_id = instance.pk
        transaction.on_commit(
            lambda: publish_checkpoint_task.delay(Checkpoint.Reason.INVOICE, invoice_id), robust=True
        )
