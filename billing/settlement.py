"""After an invoice is final: it is paid, or corrected by credit and debit notes.

Retry semantics: paying a paid invoice is a no-op; a note is a new document each time (callers that
retry, disputes and outcomes, hold their own once-only keys).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from common.money import round_money
from pricing.errors import BillingError

from . import events
from .models import Invoice, InvoiceLine, Note
from .webhook_events import publish_invoice_event


def mark_paid(invoice: Invoice, *, paid_at: datetime | None = None) -> Invoice:
    """finalized → paid; paying a paid invoice again is a no-op."""
    with transaction.atomic():
        invoice = Invoice.objects.select_for_update().get(pk=invoice.pk)
        if invoice.status == Invoice.Status.PAID:
            return invoice
        if invoice.status != Invoice.Status.FINALIZED:
            raise BillingError("invalid_transition", f"A {invoice.status} invoice cannot be paid.")
        invoice.status = Invoice.Status.PAID
        invoice.paid_at = paid_at or timezone.now()
        invoice.save(update_fields=["status", "paid_at"])
        publish_invoice_event("invoice.paid", invoice)
        return invoice


def issue_note(
    invoice: Invoice, kind: str, amount: Decimal, reason: str, *, line: InvoiceLine | None = None
) -> Note:
    """A credit or debit note on a finalised (or paid) invoice. A credit note cannot exceed what the
    invoice and its earlier notes leave, nor a line's amount when it corrects one line. Credit notes
    that cover a finalised invoice's amount due settle it (paid)."""
    if kind not in Note.Kind.values:
        raise BillingError("invalid_note", f"Unknown note kind {kind!r}.")
    if amount <= 0 or round_money(amount, invoice.currency) != amount:
        raise BillingError("invalid_amount", f"A note amount is positive, in {invoice.currency} minor units.")
    with transaction.atomic():
        invoice = Invoice.objects.select_for_update().get(pk=invoice.pk)
        if invoice.status not in (Invoice.Status.FINALIZED, Invoice.Status.PAID):
            raise BillingError(
                "invalid_transition", f"Notes correct finalised invoices, not a {invoice.status} one."
            )
        notes = list(invoice.notes.all())
        net = invoice.total + sum((n.amount if n.kind == "debit" else -n.amount for n in notes), Decimal(0))
        if kind == "credit" and amount > net:
            raise BillingError("note_exceeds_invoice", f"A credit note of {amount} exceeds the {net} left.")
        if kind == "credit" and line is not None:
            credited = sum(
                (n.amount for n in notes if n.line_id == line.pk and n.kind == "credit"), Decimal(0)
            )
            if amount > line.amount - credited:
                raise BillingError(
                    "note_exceeds_line", f"The line has {line.amount - credited} left to credit."
                )
        prefix = "CN" if kind == "credit" else "DN"
        number = f"{invoice.number}-{prefix}{sum(1 for n in notes if n.kind == kind) + 1}"
        note = Note.objects.create(
            invoice=invoice, line=line, kind=kind, number=number, reason=reason[:200], amount=amount
        )
        if kind == "credit":
            invoice.credit_notes += amount
            invoice.owe()
            invoice.save(update_fields=["credit_notes", "amount_due"])
        events.note_issued.send(sender=Note, note=note)
        if invoice.status == Invoice.Status.FINALIZED and kind == "credit" and invoice.amount_due == 0:
            # Nothing is left to collect: settled, as Stripe marks an invoice whose amount remaining
            # reaches zero paid. Its Stripe push (if any) finds nothing to charge.
            mark_paid(invoice)
        return note
