"""Stripe Checkout for catalogue purchases.

A contract bought on a `checkout` plan waits in `pending_payment` (not served, not billed) while a
Checkout Session charges its first period's base fee. When Stripe reports the session paid
(`checkout.session.completed`, or `checkout.session.async_payment_succeeded` for delayed methods;
see billing.payments), the contract becomes active and the payment is booked as prepaid credits, which
its first invoice consumes, so the base fee is never charged twice. A session that expires unpaid
(`checkout.session.expired`, `checkout.session.async_payment_failed`) cancels the contract.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import stripe
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from common.errors import ApiError
from common.money import MINOR_UNITS
from contracts.models import Contract

from .payments import client, minor_units, sync_customer
from .services import grant_credits


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
