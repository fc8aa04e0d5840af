"""A ledger checkpoint is published whenever an invoice is created (after its transaction commits), so
the invoice's records are covered by a signed tree head. Connected in BillingConfig.ready."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ledger.models import Checkpoint
from ledger.tasks import publish_checkpoint_task

from .models import Invoice


def checkpoint_on_invoice(sender: type[Invoice], instance: Invoice, created: bool, **kwargs: Any) -> None:
    if created:
        invoice_id = instance.pk
        transaction.on_commit(
            lambda: publish_checkpoint_task.delay(Checkpoint.Reason.INVOICE, invoice_id), robust=True
        )
