"""Stripe's webhook: each verified event applied once, by the part of billing it concerns (checkout
sessions, for a purchase or an invoice, and superseded PaymentIntents by billing.checkout; payments and
refunds by billing.payments)."""

from __future__ import annotations

import stripe
from django.conf import settings
from django.db import IntegrityError, transaction

from pricing.errors import InvalidRequest

from . import checkout
from .models import StripeEvent
from .payments import apply_payment_event

CHECKOUT_PAID = ("checkout.session.completed", "checkout.session.async_payment_succeeded")
CHECKOUT_FAILED = ("checkout.session.expired", "checkout.session.async_payment_failed")


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


def _apply(event: stripe.Event) -> None:
    obj = event.data.object.to_dict()
    if event.type in CHECKOUT_PAID and (obj.get("metadata") or {}).get("invoice_id"):
        checkout.complete_invoice_checkout(obj)
    elif event.type in CHECKOUT_PAID:
        checkout.complete_checkout(obj)
    elif event.type in CHECKOUT_FAILED:
        checkout.cancel_checkout(obj)  # an invoice's expired session changes nothing: Pay opens another
    elif event.type == "payment_intent.succeeded" and checkout.refund_superseded(obj):
        return
    else:
        apply_payment_event(event)
