"""Reads of a tenant's sandbox, all from the sandbox's own records (`sandbox_records`): the three core
figures of its page (response time, acceptance rate, monthly volume) and the projected invoice of a
combination of its packages — a preview, rated by billing's rating but never saved, numbered or sent."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime
from decimal import Decimal

from accounts.access import Principal
from billing.business_events import BILLABLE, business_events
from billing.rating import PeriodUsage, RatedInvoice, rate_period
from billing.selectors import ContractMeter, usage_by_contract
from billing.terms import Terms, terms_of
from catalog.models import PackagePlan
from clickhouse_store.queries.sandbox import sandbox_daily_volume, sandbox_figures
from common.periods import month_bounds, month_of
from pricing.dimensions import DIMENSION_LABELS

from .errors import SandboxError, SandboxNotFound
from .models import Sandbox

PLACES = Decimal("0.000001")


@dataclass(frozen=True)
class SandboxMetrics:
    month: str
    records: int  # this month's calls (monthly volume)
    served: int
    p50_ms: float  # response time of the served calls
    p99_ms: float
    events: int  # business events (of packages measured in them)
    accepted: int  # of which billable: every required capability served and accepted
    daily: list[tuple[date, int]]  # calls per day

    @property
    def acceptance_rate(self) -> Decimal | None:
        """Accepted ÷ events; None without events."""
        return (Decimal(self.accepted) / self.events).quantize(Decimal("0.0001")) if self.events else None


@dataclass(frozen=True)
class Projection:
    """The month's invoice as the sandbox's usage so far projects it: each quantity measured from the
    month's start to `measured_until` and scaled by `factor` to the whole month, then rated."""

    month: str
    packages: list[str]
    measured_until: datetime
    factor: Decimal
    invoice: RatedInvoice
    currency: str


def sandbox_of(principal: Principal, tenant: str | None = None) -> Sandbox:
    """The sandbox of the principal's tenant; staff name the tenant. SandboxNotFound when there is none,
    and for a customer naming another tenant (a filter narrows what the caller sees: common.filters)."""
    code = tenant if principal.is_staff else principal.tenant_code
    sandboxes = Sandbox.objects.select_related("tenant", "contract")
    found = sandboxes.filter(tenant__code=code).first() if code and tenant in (None, code) else None
    if found is None:
        raise SandboxNotFound("sandbox_not_found", "No sandbox is open: open one with its packages.")
    return found


def sandbox_metrics(sandbox: Sandbox, now: datetime) -> SandboxMetrics:
    start, end = month_bounds(month_of(now))
    tenant, contract = sandbox.tenant.code, sandbox.contract.code
    figures = sandbox_figures(tenant, contract, start, end)
    events = business_events(sandbox.contract, start, end).events
    return SandboxMetrics(
        month_of(now),
        figures.records,
        figures.served,
        figures.p50_ms,
        figures.p99_ms,
        len(events),
        sum(e.status == BILLABLE for e in events),
        sandbox_daily_volume(tenant, contract, start, end),
    )


def projected_invoice(sandbox: Sandbox, packages: Sequence[str], now: datetime) -> Projection:
    """The projected invoice of this month for these of the sandbox's packages (none named: all):
    their records only, the prices of the built-in dimensions and of their business-event units, and
    the sum of their plans' base fees. A preview: nothing is saved."""
    contract = sandbox.contract
    held = [p.code for p in contract.held_packages()]
    chosen = list(dict.fromkeys(packages)) or held
    unknown = [code for code in chosen if code not in held]
    if unknown:
        raise SandboxError(
            "package_not_in_sandbox", f"The sandbox holds no package {unknown[0]!r}.", {"package": unknown[0]}
        )
    month = month_of(now)
    start, end = month_bounds(month)
    terms = _for_packages(terms_of(contract, start, end), chosen, sandbox.plans)
    meter = ContractMeter(sandbox.tenant.code, contract.code, terms.metrics, events=terms.events)
    measured = usage_by_contract([meter], start, now, sandbox=True, packages=chosen)[contract.code]
    elapsed = max((now - start).total_seconds(), 1.0)
    factor = (Decimal((end - start).total_seconds()) / Decimal(elapsed)).quantize(PLACES)
    projected = PeriodUsage(
        measured.record_count,
        {d: (q * factor).quantize(PLACES) for d, q in measured.quantities.items()},
    )
    return Projection(month, chosen, now, factor, rate_period(terms, projected, start, end), terms.currency)


def _for_packages(terms: Terms, chosen: Sequence[str], plans: dict[str, str]) -> Terms:
    """The terms of a combination: every built-in dimension's and metric's charge, the event units of the
    chosen packages only, the chosen packages' plans' base fees, for a whole month."""
    events = {unit: e for unit, e in terms.events.items() if e.package in chosen}
    kept = {*DIMENSION_LABELS, *terms.metrics, *events}
    charges = [c for c in terms.charges if c.dimension in kept]
    fees = sum(
        (
            plan.base_fee
            for plan in PackagePlan.objects.filter(package__code__in=chosen).select_related("package")
            if plan.code == plans.get(plan.package.code)
        ),
        Decimal(0),
    )
    base_fee = format(fees.normalize(), "f")
    return replace(terms, charges=charges, events=events, base_fee=base_fee, starts_at="", ends_at="")
