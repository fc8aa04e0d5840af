"""Stripe: sync the tenant's customer, push finalised invoices as PaymentIntents for their amount due
(idempotency keys derived from our ids, so a retry never charges twice), and apply webhook events:
a paid PaymentIntent pays its invoice (and publishes `invoice.paid`), a paid Checkout Session
activates the contract it was opened for (billing.checkout).

Tests point STRIPE_API_BASE at a local fake of the Stripe HTTP API; signatures are real HMAC-SHA256.
"""

from __future__ import annotations

from decimal import Decimal

import stripe
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import Tenant
from contracts.money import MINOR_UNITS
from webhooks.events import publish_invoice_event

from .errors import BillingError, InvalidRequest
from .models import Invoice, StripeCustomer, StripeEvent, StripePayment
from .services import mark_paid


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
    """Create the PaymentIntent for a finalised invoice's amount due. Idempotent: the key is the invoice
    number, and an invoice already pushed is returned as it is. Errors propagate after being recorded."""
    if invoice.status != Invoice.Status.FINALIZED or not invoice.number:
        raise InvalidRequest(
            "invoice_not_final", f"Only finalised invoices are pushed, not {invoice.status}."
        )
    payment, _ = StripePayment.objects.get_or_create(invoice=invoice)
    if payment.payment_intent_id:
        return payment
    payment.attempts += 1
    try:
        customer = sync_customer(invoice.tenant)
        intent = client().v1.payment_intents.create(
            {
                "amount": minor_units(invoice.amount_due, invoice.currency),
                "currency": invoice.currency.lower(),
                "customer": customer.customer_id,
                "description": f"Invoice {invoice.number}",
                "metadata": {"invoice": invoice.number, "invoice_id": str(invoice.pk)},
            },
            {"idempotency_key": f"invoice-{invoice.issuing_entity}-{invoice.number}"},
        )
    except stripe.StripeError as error:
        payment.last_error = f"{type(error).__name__}: {error.user_message or error}"
        payment.save(update_fields=["attempts", "last_error", "updated_at"])
        raise
    payment.payment_intent_id = intent.id
    payment.status = StripePayment.Status.PUSHED
    payment.last_error = ""
    payment.save()
    return payment


def handle_webhook(payload: bytes, signature: str | None) -> tuple[str, bool]:
    """Verify the Stripe signature and apply the event once. Returns (event type, newly handled)."""
    try:
        event = stripe.Webhook.construct_event(payload, signature, settings.STRIPE_WEBHOOK_SECRET)
    except (stripe.SignatureVerificationError, ValueError) as error:
        raise InvalidRequest("invalid_signature", f"The Stripe signature does not verify: {error}") from None
    try:
        with transaction.atomic():
            StripeEvent.objects.create(event_id=event.id, event_type=event.type)
            _apply(event)
    except IntegrityError:
        return event.type, False  # redelivered
    return event.type, True


CHECKOUT_PAID = ("checkout.session.completed", "checkout.session.async_payment_succeeded")
CHECKOUT_FAILED = ("checkout.session.expired", "checkout.session.async_payment_failed")


def _apply(event: stripe.Event) -> None:
    if event.type in CHECKOUT_PAID + CHECKOUT_FAILED:
        from . import checkout  # checkout builds on this module (its Stripe client and customers)

        session = event.data.object.to_dict()
        if event.type in CHECKOUT_PAID:
            checkout.complete_checkout(session)
        else:
            checkout.cancel_checkout(session)
        return
    if event.type not in ("payment_intent.succeeded", "payment_intent.payment_failed"):
        return
    intent = event.data.object.to_dict()
    payment = StripePayment.objects.select_related("invoice").filter(payment_intent_id=intent["id"]).first()
    if payment is None:
        return
    if event.type == "payment_intent.succeeded":
        publish_invoice_event("invoice.paid", mark_paid(payment.invoice))
        payment.status = StripePayment.Status.SUCCEEDED
    else:
        error = intent.get("last_payment_error") or {}
        payment.status = StripePayment.Status.FAILED
        payment.last_error = str(error.get("message", "payment failed"))
    payment.save(update_fields=["status", "last_error", "updated_at"])
