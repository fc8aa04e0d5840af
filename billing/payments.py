"""Stripe: sync the tenant's customer, push finalised invoices as PaymentIntents for their amount due
less credit notes (idempotency keys derived from our ids, so a retry never charges twice), send credit
notes (a Refund of a paid PaymentIntent, else the open PaymentIntent lowered or canceled) and debit notes
(a PaymentIntent of their own), and apply webhook events: a paid PaymentIntent pays its invoice (and
publishes `invoice.paid`) or its debit note, a failed refund marks its credit note failed, a paid
Checkout Session activates the contract it was opened for (billing.checkout).

Tests point STRIPE_API_BASE at a local fake of the Stripe HTTP API; signatures are real HMAC-SHA256.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import stripe
from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from accounts.models import Tenant
from common.money import MINOR_UNITS
from pricing.errors import BillingError, InvalidRequest

from . import settlement
from .models import ZERO, Invoice, Note, StripeCustomer, StripeNote, StripePayment
from .webhook_events import publish_invoice_event

# Worth retrying with the same idempotency key: Stripe unreachable, rate-limited or failing (5xx).
TRANSIENT = (stripe.APIConnectionError, stripe.RateLimitError, stripe.APIError)


class PushInFlight(BillingError):
    """The invoice's PaymentIntent is being created: its credit note waits for it (and is retried)."""


def client() -> stripe.StripeClient:
    if not settings.STRIPE_API_KEY:
        raise BillingError("stripe_not_configured", "Set STRIPE_API_KEY to push invoices to Stripe.")
    return stripe.StripeClient(
        settings.STRIPE_API_KEY,
        base_addresses={"api": settings.STRIPE_API_BASE},
        max_network_retries=0,  # the Celery task retries, with backoff, and records each attempt
    )


def minor_units(amount: Decimal, currency: str) -> int:
    """Stripe amounts are integers in the currency's minor unit (CNY fen, JPY yen)."""
    return int(amount.scaleb(MINOR_UNITS[currency]))


def _error_text(error: Exception) -> str:
    if isinstance(error, BillingError):
        return f"{error.code}: {error.message}"
    if isinstance(error, stripe.StripeError):
        return f"{type(error).__name__}: {error.user_message or error}"
    return str(error)


def sync_customer(tenant: Tenant) -> StripeCustomer:
    """The tenant's Stripe customer, created once (idempotency key = tenant code), then kept up to date."""
    existing = StripeCustomer.objects.filter(tenant=tenant).first()
    metadata = {"tenant": tenant.code}
    if existing is None:
        customer = client().v1.customers.create(
            {"name": tenant.name, "metadata": metadata}, {"idempotency_key": f"customer-{tenant.code}"}
        )
        row, _ = StripeCustomer.objects.get_or_create(
            tenant=tenant, defaults={"customer_id": customer.id, "synced_at": timezone.now()}
        )
        return row
    client().v1.customers.update(existing.customer_id, {"name": tenant.name, "metadata": metadata})
    existing.synced_at = timezone.now()
    existing.save(update_fields=["synced_at"])
    return existing


def push_invoice(invoice: Invoice) -> StripePayment:
    """Create the PaymentIntent for a finalised invoice's amount due (after its credit notes). Idempotent:
    the key is the invoice number, and an invoice already pushed is returned as it is. Nothing left to
    charge (credited in full, or paid, before the push): no PaymentIntent, status `canceled`. Errors
    propagate after being recorded."""
    if invoice.status not in (Invoice.Status.FINALIZED, Invoice.Status.PAID) or not invoice.number:
        raise InvalidRequest(
            "invoice_not_final", f"Only finalised invoices are pushed, not {invoice.status}."
        )
    payment, _ = StripePayment.objects.get_or_create(invoice=invoice)
    if payment.payment_intent_id or payment.status == StripePayment.Status.CANCELED:
        return payment
    # Paid before its push: settled by credit notes (settlement.issue_note) or otherwise outside Stripe.
    amount = ZERO if invoice.status == Invoice.Status.PAID else invoice.amount_due
    if amount <= 0:
        payment.status, payment.amount, payment.last_error = StripePayment.Status.CANCELED, ZERO, ""
        payment.save()
        return payment
    payment.attempts += 1
    try:
        customer = sync_customer(invoice.tenant)
        intent = client().v1.payment_intents.create(
            {
                "amount": minor_units(amount, invoice.currency),
                "currency": invoice.currency.lower(),
                "customer": customer.customer_id,
                "description": f"Invoice {invoice.number}",
                "metadata": {"invoice": invoice.number, "invoice_id": str(invoice.pk)},
            },
            {"idempotency_key": f"invoice-{invoice.issuing_entity}-{invoice.number}"},
        )
    except stripe.StripeError as error:
        payment.last_error = _error_text(error)
        payment.save(update_fields=["attempts", "last_error", "updated_at"])
        raise
    payment.payment_intent_id = intent.id
    payment.amount = amount
    payment.status = StripePayment.Status.PUSHED
    payment.last_error = ""
    payment.save()
    return payment


def push_note(note: Note) -> StripeNote:
    """Send a credit or debit note to Stripe once (idempotency key from the note: a retry never refunds
    or charges twice).

    Credit note, paid PaymentIntent: a Refund of the note's amount, never more than was received less
    earlier refunds (`refund_exceeds_payment`). Open one: its amount lowered to the amount due less all
    credit notes, or canceled when that is zero. No PaymentIntent: nothing is sent (`skipped`), since a
    later push charges the net amount; one being created raises PushInFlight, to be retried.

    Debit note: a PaymentIntent of its own for the note's amount (a paid invoice cannot be charged
    again, and an open PaymentIntent may already be confirmed); a webhook marks it paid.

    Transient Stripe errors leave the row pending (to retry); other errors mark it failed, and running it
    again retries it. Errors propagate after being recorded."""
    row, _ = StripeNote.objects.get_or_create(note=note)
    if row.status in (StripeNote.Status.PUSHED, StripeNote.Status.SKIPPED) or row.stripe_id:
        return row  # done, or a refund Stripe reported failed: its money goes back another way
    row.attempts += 1
    try:
        if note.kind == Note.Kind.DEBIT:
            _charge_debit_note(row, note)
        else:
            with transaction.atomic():
                # The payment row is locked: one credit note per invoice at a time, so refunds add up.
                payment = StripePayment.objects.select_for_update().filter(invoice_id=note.invoice_id).first()
                _send_credit_note(row, note, payment)
    except (stripe.StripeError, BillingError) as error:
        row.last_error = _error_text(error)
        if not isinstance(error, (*TRANSIENT, PushInFlight)):
            row.status = StripeNote.Status.FAILED
        row.save(update_fields=["attempts", "status", "last_error", "updated_at"])
        raise
    row.last_error = ""
    row.save()
    return row


def _charge_debit_note(row: StripeNote, note: Note) -> None:
    invoice = note.invoice
    customer = sync_customer(invoice.tenant)
    intent = client().v1.payment_intents.create(
        {
            "amount": minor_units(note.amount, invoice.currency),
            "currency": invoice.currency.lower(),
            "customer": customer.customer_id,
            "description": f"Debit note {note.number} on invoice {invoice.number}",
            "metadata": {
                "debit_note": note.number,
                "debit_note_id": str(note.pk),
                "invoice": invoice.number or "",  # notes exist on finalised (numbered) invoices only
            },
        },
        {"idempotency_key": f"debit-note-{invoice.issuing_entity}-{note.number}"},
    )
    row.action, row.amount, row.stripe_id = StripeNote.Action.CHARGE, note.amount, intent.id
    row.status = StripeNote.Status.PUSHED


def _send_credit_note(row: StripeNote, note: Note, payment: StripePayment | None) -> None:
    invoice = note.invoice
    if payment is not None and not payment.payment_intent_id:
        if payment.status == StripePayment.Status.PENDING:
            raise PushInFlight(
                "invoice_push_in_flight", f"Invoice {invoice.number} is being pushed to Stripe."
            )
        payment = None  # its push failed for good, or found nothing to charge
    if payment is None or payment.status == StripePayment.Status.CANCELED:
        row.status = StripeNote.Status.SKIPPED
        return
    key: stripe.RequestOptions = {"idempotency_key": f"credit-note-{invoice.issuing_entity}-{note.number}"}
    if payment.status == StripePayment.Status.SUCCEEDED:
        left = payment.amount - _refunded(invoice)
        if note.amount > left:
            raise BillingError(
                "refund_exceeds_payment",
                f"Credit note {note.number} ({note.amount} {invoice.currency}) exceeds the {left} "
                f"{invoice.currency} paid through Stripe and not refunded yet.",
            )
        refund = client().v1.refunds.create(
            {
                "payment_intent": payment.payment_intent_id,
                "amount": minor_units(note.amount, invoice.currency),
                "metadata": {"credit_note": note.number, "credit_note_id": str(note.pk)},
            },
            key,
        )
        row.action, row.amount, row.stripe_id = StripeNote.Action.REFUND, note.amount, refund.id
    else:  # pushed, or its payment failed: the PaymentIntent is still open
        amount = invoice.amount_due  # after every credit note issued so far
        if amount > 0:
            client().v1.payment_intents.update(
                payment.payment_intent_id, {"amount": minor_units(amount, invoice.currency)}, key
            )
            row.action = StripeNote.Action.REDUCE
        else:
            client().v1.payment_intents.cancel(payment.payment_intent_id, {}, key)
            row.action = StripeNote.Action.CANCEL
            payment.status = StripePayment.Status.CANCELED
        row.amount, row.stripe_id = amount, payment.payment_intent_id
        payment.amount = amount
        payment.save(update_fields=["amount", "status", "updated_at"])
    row.status = StripeNote.Status.PUSHED


def _refunded(invoice: Invoice) -> Decimal:
    """Refunds already sent for the invoice's credit notes (those Stripe reported failed excluded)."""
    refunds = StripeNote.objects.filter(
        note__invoice=invoice, action=StripeNote.Action.REFUND, status=StripeNote.Status.PUSHED
    )
    return refunds.aggregate(sum=Sum("amount"))["sum"] or ZERO


def cancel_intent(intent_id: str) -> None:
    """Cancel a PaymentIntent nobody should pay any more (superseded by a Checkout payment). One already
    paid is left to its `payment_intent.succeeded` event, which refunds it (billing.checkout)."""
    try:
        client().v1.payment_intents.cancel(intent_id, {}, {"idempotency_key": f"cancel-{intent_id}"})
    except stripe.InvalidRequestError as error:
        if error.code != "payment_intent_unexpected_state":
            raise


def refund_received(intent_id: str, cents: int, invoice_number: str, key: str) -> str:
    """Give back money received beyond what an invoice asks (paid twice, or after a credit note); the
    idempotency key names the cause, so a retry never refunds twice. Returns the Refund id."""
    refund = client().v1.refunds.create(
        {"payment_intent": intent_id, "amount": cents, "metadata": {"invoice": invoice_number, "cause": key}},
        {"idempotency_key": f"refund-{key}"},
    )
    return str(refund.id)


def apply_payment_event(event: stripe.Event) -> None:
    """A Stripe event about an invoice's or a debit note's payment, or a refund; others change nothing."""
    if event.type in REFUND_EVENTS:
        obj = event.data.object.to_dict()
        refunds = (obj.get("refunds") or {}).get("data", []) if obj.get("object") == "charge" else [obj]
        for refund in refunds:
            _apply_refund(refund)
        return
    if event.type not in ("payment_intent.succeeded", "payment_intent.payment_failed"):
        return
    intent = event.data.object.to_dict()
    payment = StripePayment.objects.select_related("invoice").filter(payment_intent_id=intent["id"]).first()
    if payment is None:
        _apply_debit_note_payment(event.type, intent)
        return
    if event.type == "payment_intent.succeeded":
        publish_invoice_event("invoice.paid", settlement.mark_paid(payment.invoice))
        payment.status = StripePayment.Status.SUCCEEDED
        if "amount_received" in intent:  # what was actually charged: refunds are bounded by it
            payment.amount = Decimal(intent["amount_received"]).scaleb(-MINOR_UNITS[payment.invoice.currency])
    else:
        error = intent.get("last_payment_error") or {}
        payment.status = StripePayment.Status.FAILED
        payment.last_error = str(error.get("message", "payment failed"))
    payment.save(update_fields=["status", "amount", "last_error", "updated_at"])


REFUND_EVENTS = ("refund.updated", "refund.failed", "charge.refunded")


def _apply_debit_note_payment(event_type: str, intent: dict[str, Any]) -> None:
    """A debit note's own PaymentIntent paid (the note is paid) or failed (visible, with Stripe's reason)."""
    row = StripeNote.objects.filter(action=StripeNote.Action.CHARGE, stripe_id=intent["id"]).first()
    if row is None:
        return
    if event_type == "payment_intent.succeeded":
        row.status, row.last_error = StripeNote.Status.PAID, ""
    else:
        error = intent.get("last_payment_error") or {}
        row.status = StripeNote.Status.FAILED
        row.last_error = f"Payment failed: {error.get('message', 'no reason given')}"
    row.save(update_fields=["status", "last_error", "updated_at"])


def _apply_refund(refund: dict[str, Any]) -> None:
    """A refund Stripe could not carry out (failed or canceled) marks its credit note failed, visibly."""
    if refund.get("status") not in ("failed", "canceled"):
        return
    row = StripeNote.objects.filter(action=StripeNote.Action.REFUND, stripe_id=refund.get("id")).first()
    if row is None:
        return
    row.status = StripeNote.Status.FAILED
    row.last_error = f"Refund {refund['status']}: {refund.get('failure_reason') or 'no reason given'}"
    row.save(update_fields=["status", "last_error", "updated_at"])
