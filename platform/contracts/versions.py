"""When a new price version may start: the contract's own rules, plus the guards a layer above adds.

Billing adds one at start-up (billing.apps: no version inside a period already invoiced for good), so the
API, the purchase flow and the admin's forms all get it while contracts imports nothing of billing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from django.utils import timezone

from common.periods import month_bounds, month_of
from pricing.dimensions import Dimension
from pricing.errors import TermsError


class Dated(Protocol):
    """What the rules read of a contract (contracts.models.Contract, which calls them)."""

    starts_at: datetime


# A guard gets the contract, the version's instant and the error details; it raises to refuse.
PriceVersionGuard = Callable[[Any, datetime, dict[str, Any]], None]
_GUARDS: list[PriceVersionGuard] = []


def add_price_version_guard(guard: PriceVersionGuard) -> None:
    """Run `guard` on every new price version (once per guard, however often it is added)."""
    if guard not in _GUARDS:
        _GUARDS.append(guard)


def check_price_version(contract: Dated, dimension: str, effective_from: datetime) -> datetime | None:
    """The instant a new price version of `dimension` may start at, or an error: not before the
    contract start (the start itself is the initial version's instant: None), for outcomes (billed per
    period, not per record time) only at a period start, and whatever the added guards refuse (billing:
    not inside a period already invoiced for good). Two versions at one instant are refused by the
    caller and the unique constraints."""
    if timezone.is_naive(effective_from):
        raise TermsError("naive_datetime", "'effective_from' needs a time zone (UTC).", {})
    details = {"dimension": dimension, "effective_from": effective_from.isoformat()}
    if effective_from < contract.starts_at:
        raise TermsError(
            "effective_before_contract_start",
            f"A price cannot apply before the contract starts ({contract.starts_at.isoformat()}).",
            details,
        )
    instant = None if effective_from == contract.starts_at else effective_from
    if instant is not None and dimension == Dimension.OUTCOMES and instant != _period_start(instant):
        raise TermsError(
            "outcome_price_mid_period",
            "Outcomes are billed per period: their price can change at a period start (UTC month) only.",
            details,
        )
    for guard in _GUARDS:
        guard(contract, effective_from, details)
    return instant


def _period_start(moment: datetime) -> datetime:
    return month_bounds(month_of(moment))[0]
