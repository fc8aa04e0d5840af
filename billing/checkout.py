"""Stripe Checkout: catalogue purchases, and paying a finalised invoice (the portal's Pay action).

A contract bought on a `checkout` plan waits in `pending_payment` (not served, not billed) while a
Checkout Session charges its first period's base fee. When Stripe reports the session paid
(`checkout.session.completed`, or `checkout.session.async_payment_succeeded` for delayed methods;
see billing.payments), the contract becomes active and the payment is booked as prepaid credits, which
its first invoice consumes, so the base fee is never charged twice. A session that expires unpaid
(`checkout.session.expired`, `checkout.session.async_payment_failed`) cancels the contract.

An invoice's session charges its amount due. Once paid, its PaymentIntent becomes the invoice's
payment (later credit notes refund it); the PaymentIntent pushed at finalisation is canceled, and
refunded in full should it be paid anyway. Whatever is received beyond the amount due (an invoice paid
twice, or a credit note issued while the session was open) is refunded.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any

import stripe
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from common.errors import ApiError
from common.money import MINOR_UNITS
from contracts.models import Contract
from pricing.errors import BillingError

from . import settlement
from .models import ZERO, Invoice, StripePayment
from .payments import client, minor_units, sync_customer
from .services import grant_credits
from .tasks import cancel_intent_task, refund_task


class PaymentProviderError(ApiError):
    """Stripe did not answer; nothing was bought, the same request may be retried."""

    http_status = 502


def _return_url(outcome: str) -> str:
    base = settings.CHECKOUT_RETURN_URL
    return f"{base}?checkout={outcome}"


def start_checkout(contract: Contract) -> str:
    """Create the contract's Checkout Session (idempotency key = contract code) and return its URL."""
    title = f"{contract.package.name} ({contract.plan.name if contract.plan else contract.package.code})"
    try:
        customer = sync_customer(contract.tenant)
        session = client().v1.checkout.sessions.create(
            {
                "mode": "payment",
                "customer": customer.customer_id,
                "client_reference_id": contract.code,
                "line_items": [
                    {
                        "quantity": 1,
                        "price_data": {
                            "currency": contract.currency.lower(),
                            "unit_amount": minor_units(contract.base_fee, contract.currency),
                            "product_data": {"name": title},
                        },
                    }
                ],
                "metadata": {"contract": contract.code, "tenant": contract.tenant.code},
                "success_url": _return_url("success"),
                "cancel_url": _return_url("cancelled"),
            },
            {"idempotency_key": f"checkout-{contract.code}"},
        )
    except stripe.StripeError as error:
        raise PaymentProviderError(
            "payment_provider_unavailable", f"Stripe Checkout failed: {error.user_message or error}"
        ) from None
    contract.checkout_session_id = session.id
    contract.save(update_fields=["checkout_session_id"])
    return str(session.url)


def complete_checkout(session: dict[str, Any]) -> Contract | None:
    """Activate the contract a paid session pays for and book the payment as credits. Idempotent: an
    active contract is returned unchanged; an unpaid session or an unknown one changes nothing."""
    if session.get("payment_status") != "paid":
        return None
    with transaction.atomic():
        contract = Contract.objects.select_for_update().filter(checkout_session_id=session["id"]).first()
        if contract is None or contract.status != Contract.Status.PENDING_PAYMENT:
            return contract
        paid = Decimal(int(session["amount_total"])).scaleb(-MINOR_UNITS[contract.currency])
        grant_credits(contract, paid, f"checkout:{session['id']}")
        contract.status = Contract.Status.ACTIVE
        contract.save(update_fields=["status"])
        return contract


def cancel_checkout(session: dict[str, Any]) -> Contract | None:
    """The session will never be paid: its pending contract is cancelled (never served, never billed).
    A contract already active is left alone."""
    with transaction.atomic():
        contract = Contract.objects.select_for_update().filter(checkout_session_id=session["id"]).first()
        if contract is None or contract.status != Contract.Status.PENDING_PAYMENT:
            return contract
        contract.status, contract.ends_at = Contract.Status.CANCELLED, timezone.now()
        contract.save(update_fields=["status", "ends_at"])
        return contract


def start_invoice_checkout(invoice: Invoice, return_url: str) -> str:
    """Open a Checkout Session for a finalised invoice's amount due and return its URL. Asking again for
    the same amount and return page returns the same session (the idempotency key; Stripe keeps it
    24 hours); an amount lowered by a credit note opens a new one."""
    if (
        invoice.status == Invoice.Status.PAID
        or StripePayment.objects.filter(invoice=invoice, status=StripePayment.Status.SUCCEEDED).exists()
    ):
        raise BillingError("invoice_paid", f"Invoice {invoice.number} is already paid.")
    if invoice.status != Invoice.Status.FINALIZED or not invoice.number:
        raise BillingError(
            "invoice_not_final", f"Only a finalised invoice can be paid, not a {invoice.status} one."
        )
    amount = invoice.amount_due
    if amount <= 0:
        raise BillingError("nothing_due", f"Invoice {invoice.number} leaves nothing to pay.")
    cents = minor_units(amount, invoice.currency)
    page = hashlib.sha256(return_url.encode()).hexdigest()[:12]
    metadata = {"invoice": invoice.number, "invoice_id": str(invoice.pk), "tenant": invoice.tenant.code}
    try:
        customer = sync_customer(invoice.tenant)
        session = client().v1.checkout.sessions.create(
            {
                "mode": "payment",
                "customer": customer.customer_id,
                "client_reference_id": invoice.number,
                "line_items": [
                    {
                        "quantity": 1,
                        "price_data": {
                            "currency": invoice.currency.lower(),
                            "unit_amount": cents,
                            "product_data": {"name": f"Invoice {invoice.number}"},
                        },
                    }
                ],
                "payment_intent_data": {"description": f"Invoice {invoice.number}", "metadata": metadata},
                "metadata": metadata,
                "success_url": f"{return_url}?payment=success",
                "cancel_url": f"{return_url}?payment=cancelled",
            },
            {"idempotency_key": f"invoice-checkout-{invoice.issuing_entity}-{invoice.number}-{cents}-{page}"},
        )
    except stripe.StripeError as error:
        raise PaymentProviderError(
            "payment_provider_unavailable", f"Stripe Checkout failed: {error.user_message or error}"
        ) from None
    StripePayment.objects.get_or_create(invoice=invoice)
    StripePayment.objects.filter(invoice=invoice).update(checkout_session_id=session.id)
    return str(session.url)


def complete_invoice_checkout(session: dict[str, Any]) -> Invoice | None:
    """A paid invoice session: the invoice is paid, the session's PaymentIntent becomes its payment and
    the one pushed before is canceled; any excess over the amount due is refunded. Idempotent (the
    webhook's event id, and the payment row locked); an unpaid or unknown session changes nothing."""
    if session.get("payment_status") != "paid":
        return None
    invoice = Invoice.objects.filter(pk=(session.get("metadata") or {}).get("invoice_id") or 0).first()
    if invoice is None:
        return None
    intent_id = str(session["payment_intent"])
    received = Decimal(int(session["amount_total"])).scaleb(-MINOR_UNITS[invoice.currency])
    with transaction.atomic():
        StripePayment.objects.get_or_create(invoice=invoice)
        payment = StripePayment.objects.select_for_update().get(invoice=invoice)
        if payment.payment_intent_id == intent_id:
            return invoice  # this session was applied already
        invoice.refresh_from_db()
        paid_before = (
            payment.status == StripePayment.Status.SUCCEEDED or invoice.status == Invoice.Status.PAID
        )
        excess = received if paid_before else max(received - invoice.amount_due, ZERO)
        if excess > 0:
            _refund_after_commit(intent_id, excess, invoice, f"overpaid-{session['id']}")
        if paid_before:
            return invoice
        if payment.payment_intent_id:
            payment.superseded_intent_id = payment.payment_intent_id
            superseded = payment.payment_intent_id
            transaction.on_commit(lambda: cancel_intent_task.delay(superseded))
        payment.payment_intent_id, payment.amount = intent_id, received - excess
        payment.status, payment.checkout_session_id, payment.last_error = (
            StripePayment.Status.SUCCEEDED,
            str(session["id"]),
            "",
        )
        payment.save()
        return settlement.mark_paid(invoice)


def _refund_after_commit(intent_id: str, amount: Decimal, invoice: Invoice, key: str) -> None:
    cents = minor_units(amount, invoice.currency)
    transaction.on_commit(lambda: refund_task.delay(intent_id, cents, invoice.number or "", key))


def refund_superseded(intent: dict[str, Any]) -> bool:
    """A superseded PaymentIntent paid after all (before its cancel reached Stripe): the invoice was
    paid through Checkout, so this money goes back in full. False when `intent` is not a superseded one."""
    payment = (
        StripePayment.objects.select_related("invoice").filter(superseded_intent_id=intent["id"]).first()
    )
    if payment is None:
        return False
    received = int(intent.get("amount_received") or intent.get("amount") or 0)
    if received:
        invoice = payment.invoice
        number = invoice.number or ""
        transaction.on_commit(
            lambda: refund_task.delay(intent["id"], received, number, f"superseded-{intent['id']}")
        )
    return True
