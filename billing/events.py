"""What billing announces, for the parts that build on it (the Stripe push, in billing.stripe_sync).

Both are sent inside the transaction that made the change, so a receiver can write in it and defer
what must wait for the commit (`transaction.on_commit`).
"""

from __future__ import annotations

from django.dispatch import Signal

invoices_finalised = Signal()
"""Sent with `invoices`: the invoices this transaction finalised."""

note_issued = Signal()
"""Sent with `note`: the credit or debit note this transaction issued."""
