"""Invoices and notes reach Stripe: the receivers of billing.events, connected in BillingConfig.ready.

With Stripe configured, a finalised invoice with an amount due is pushed after its transaction commits
(`billing.push_invoice_to_stripe`); an issued note's push is recorded as pending inside the note's
transaction and runs after commit (`billing.push_note_to_stripe`). Both tasks are safe to retry.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction

from .models import Invoice, Note, StripeNote
from .tasks import push_invoice_task, push_note_task


def push_finalised_invoices(sender: Any, invoices: Sequence[Invoice], **kwargs: Any) -> None:
    if not settings.STRIPE_API_KEY:
        return
    for invoice in invoices:
        if invoice.amount_due > 0:
            transaction.on_commit(partial(push_invoice_task.delay, invoice.pk), robust=True)


def push_issued_note(sender: Any, note: Note, **kwargs: Any) -> None:
    if not settings.STRIPE_API_KEY:
        return
    StripeNote.objects.get_or_create(note=note)
    transaction.on_commit(partial(push_note_task.delay, note.pk), robust=True)
