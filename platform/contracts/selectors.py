"""Reads for contracts: the ones a caller may see, and each one's quotas against this period's usage.

Usage comes from ClickHouse through billing's one aggregate query (billing.selectors.usage_by_contract):
one GROUP BY for a whole page of contracts, the same numbers the invoice run rates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import QuerySet
from django.utils import timezone

from billing.rating import PeriodUsage
from billing.selectors import ContractMeter, usage_by_contract
from common.periods import month_bounds, month_of

from .models import NEVER_BILLED, Contract, prices_in_effect

ZERO = Decimal(0)


@dataclass(frozen=True)
class Quota:
    dimension: str
    charge_model: str
    unit_price: Decimal
    included: Decimal
    used: Decimal | None  # None: not measured from usage records (outcomes)
    left: Decimal | None


def visible_contracts(tenant_id: int | None) -> QuerySet[Contract]:
    """Every contract for staff (None), else the tenant's own, with what their quotas need."""
    contracts = Contract.objects.select_related("tenant", "package", "plan").prefetch_related(
        "prices", "metrics"
    )
    return contracts if tenant_id is None else contracts.filter(tenant_id=tenant_id)


def current_usage(contracts: Sequence[Contract], now: datetime) -> dict[str, PeriodUsage]:
    """This calendar month's (UTC) billable usage of the contracts that are served, in one query."""
    start, end = month_bounds(month_of(now))
    meters = [
        ContractMeter(c.tenant.code, c.code, {m.code: m.expression for m in c.metrics.all()})
        for c in contracts
        if c.status not in NEVER_BILLED
    ]
    return usage_by_contract(meters, start, end)


def quotas(contract: Contract, usage: PeriodUsage | None, now: datetime | None = None) -> list[Quota]:
    """Per priced dimension, with the price version in effect `now`: the included quantity, what this
    period used, and what is left of it (usage None: nothing measured yet, e.g. a contract waiting for
    payment)."""
    rows = []
    quantities = {} if usage is None else usage.quantities
    for price in prices_in_effect(contract.prices.all(), now or timezone.now()):
        used = quantities.get(price.dimension, ZERO if usage is None else None)
        left = None if used is None else max(price.included_quantity - used, ZERO)
        rows.append(
            Quota(price.dimension, price.charge_model, price.unit_price, price.included_quantity, used, left)
        )
    return rows
