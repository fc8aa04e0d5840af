"""Quotas: each priced dimension's included quantity this period, what was used and what is left, and
the quota watch that publishes `quota.exhausted`. Usage comes from ClickHouse through billing's one
aggregate query (billing.selectors.usage_by_contract): one GROUP BY for a whole page of contracts, the
same numbers the invoice run rates. The contract API, the portal and the watch all read `quotas` here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from celery import shared_task
from django.utils import timezone

from common.periods import month_bounds, month_of
from contracts.models import NEVER_BILLED, Contract, prices_in_effect

from .rating import PeriodUsage
from .selectors import ContractMeter, usage_by_contract
from .terms import priced_events
from .webhook_events import publish_quota_exhausted

ZERO = Decimal(0)


@dataclass(frozen=True)
class Quota:
    dimension: str
    charge_model: str
    unit_price: Decimal
    included: Decimal
    used: Decimal | None  # None: not measured from usage records (outcomes)
    left: Decimal | None

    @property
    def used_percent(self) -> int:
        """How much of the included quantity is used, 0–100 (100 when nothing is included)."""
        if self.included == 0:
            return 100
        return min(100, int((self.used or ZERO) * 100 / self.included))


def current_usage(contracts: Sequence[Contract], now: datetime) -> dict[str, PeriodUsage]:
    """This calendar month's (UTC) billable usage of the contracts that are served, in one query."""
    start, end = month_bounds(month_of(now))
    meters = []
    for contract in contracts:
        if contract.status in NEVER_BILLED:
            continue
        metrics = {m.code: m.expression for m in contract.metrics.all()}
        events = priced_events(contract, (p.dimension for p in contract.prices.all()), set(metrics))
        meters.append(ContractMeter(contract.tenant.code, contract.code, metrics, events=events))
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


def publish_exhausted_quotas(now: datetime | None = None) -> int:
    """Publish `quota.exhausted` for every served contract and dimension whose usage this month has
    reached its included quantity; once per contract, dimension and month (the event id). Returns how
    many dimensions are exhausted. Run every few minutes by the `contracts.publish_exhausted_quotas` task."""
    now = now or timezone.now()
    contracts = list(
        Contract.objects.production()
        .filter(status=Contract.Status.ACTIVE, prices__included_quantity__gt=0)
        .distinct()
        .select_related("tenant")
        .prefetch_related("prices", "metrics")
    )
    usage = current_usage(contracts, now)
    month = month_of(now)
    exhausted = 0
    for contract in contracts:
        quantities = usage[contract.code].quantities
        for price in prices_in_effect(contract.prices.all(), now):
            used = quantities.get(price.dimension)
            if price.included_quantity > 0 and used is not None and used >= price.included_quantity:
                publish_quota_exhausted(contract, price.dimension, price.included_quantity, used, month)
                exhausted += 1
    return exhausted


@shared_task(name="contracts.publish_exhausted_quotas")  # the name beat has always scheduled
def publish_exhausted_quotas_task() -> int:
    """`quota.exhausted` events for quotas used up this month (idempotent; beat runs it every 5 min)."""
    return publish_exhausted_quotas()
