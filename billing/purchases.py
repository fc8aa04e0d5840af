"""Buying a package plan: the tenant's new contract on the plan's terms, paid through Stripe Checkout
(billing.checkout) or invoiced. The catalogue itself (packages, plans, their reads) is catalog."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from accounts.access import Principal
from catalog.models import PackagePlan
from catalog.selectors import purchasable_plan
from common.errors import ApiError
from common.money import round_money
from contracts.models import Contract
from contracts.services import set_plan_charge

from .checkout import start_checkout

# A start this far in the past still counts as "now" (clock skew between the caller and us).
START_SKEW = timedelta(minutes=5)


class PurchaseError(ApiError):
    http_status = 400


class PlanNotFound(ApiError):
    http_status = 404


@dataclass(frozen=True)
class Purchase:
    contract: Contract
    checkout_url: str | None  # where the buyer pays (Stripe Checkout); None for invoiced plans


def purchase_package(
    principal: Principal, package_code: str, plan_code: str, *, starts_at: datetime | None = None
) -> Purchase:
    """A new contract for the principal's tenant on the plan's terms (prices copied from its templates).

    Invoiced plans are active at once; Checkout plans wait in `pending_payment` for Stripe to report the
    session paid (billing.checkout). Any failure, Stripe's included, leaves no contract behind.
    """
    if principal.tenant is None:
        raise PurchaseError("tenant_required", "Contracts belong to a tenant; staff users cannot buy.")
    plan = purchasable_plan(principal, package_code, plan_code)
    if plan is None:
        raise PlanNotFound(
            "plan_not_found",
            f"No purchasable plan {plan_code!r} of package {package_code!r}.",
            {"package": package_code, "plan": plan_code},
        )
    now = timezone.now()
    starts_at = starts_at or now
    if timezone.is_naive(starts_at) or starts_at < now - START_SKEW:
        raise PurchaseError(
            "invalid_start",
            "starts_at must be a time with a zone, now or later.",
            {"starts_at": str(starts_at)},
        )
    checkout = plan.payment == PackagePlan.Payment.CHECKOUT
    if checkout and (not plan.base_fee or round_money(plan.base_fee, plan.currency) != plan.base_fee):
        raise PurchaseError(
            "plan_not_payable", f"Plan {plan_code} has no base fee payable in {plan.currency}.", {}
        )
    with transaction.atomic():
        contract = Contract.objects.create(
            code=_new_code(principal.tenant.code, plan.package.code),
            tenant=principal.tenant,
            package=plan.package,
            plan=plan,
            currency=plan.currency,
            period=plan.period,
            base_fee=plan.base_fee,
            status=Contract.Status.PENDING_PAYMENT if checkout else Contract.Status.ACTIVE,
            starts_at=starts_at,
        )
        for price in plan.prices.all():
            set_plan_charge(contract, price)
        checkout_url = None
        if checkout:
            checkout_url = start_checkout(contract)
    return Purchase(contract=contract, checkout_url=checkout_url)


def _new_code(tenant: str, package: str) -> str:
    """A fresh contract code (what agents put in each record), readable and unique."""
    return f"{tenant[:26]}-{package[:26]}-{secrets.token_hex(4)}"
