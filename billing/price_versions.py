"""Billing's rule for contract price versions: none may start inside (or before) a period whose invoice
is already finalised, paid or void. History is never rewritten: a correction of a billed period is a
credit/debit note. Added to contracts.versions at start-up (billing.apps), so the API, the purchase flow
and the admin's forms all refuse such a version with 409 `period_finalised`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from contracts.models import Contract
from pricing.errors import BillingError

from .models import OPEN_STATUSES, Invoice


def refuse_invoiced_periods(contract: Contract, effective_from: datetime, details: dict[str, Any]) -> None:
    """BillingError `period_finalised` when an invoice no longer open bills a period ending after
    `effective_from`."""
    finalised = (
        Invoice.objects.filter(contract=contract, period_end__gt=effective_from)
        .exclude(status__in=OPEN_STATUSES)
        .order_by("-period_end")
        .first()
    )
    if finalised is not None:
        raise BillingError(
            "period_finalised",
            f"Invoice {finalised.number} already bills the period up to {finalised.period_end.isoformat()}.",
            {**details, "finalised_until": finalised.period_end.isoformat()},
        )
