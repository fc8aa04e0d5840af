"""Cost attribution and gross margin.

Each record costs its L3 (GPU) seconds at its host class's depreciation + power per hour, plus its
L1 + L2 seconds at operations per hour (catalog.HostCostProfile; the host class is the agent's). One
ClickHouse query sums the layer times per (agent, tenant, contract, package); the profiles are applied
per agent, never per record.

An executor lent to another subtree (the scheduler's borrow, until its return) is the borrower's for the
time it is held: the GPU hours held and not spent on records (those are costed above, to the packages
whose requests they served, the borrower's) are charged to the borrowing subtree's contracts, in
proportion to their successful requests decided for that subtree while the loan lasted (``loan_charges``).
A loan whose borrower served nothing while holding it is charged to no contract; the scheduler page still
shows it.

Revenue is what the period's issued invoices (finalised or paid; not drafts, not void) billed before
tax, less their credit notes, plus their debit notes; a note counts in its invoice's period. The
finance pages use the same definition (`net_revenue_by`). A cost report compares revenue in the cost
profiles' currency only (`cost_currency`), so it never adds currencies.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Case, F, QuerySet, Sum, When
from django.utils import timezone

from agents.models import Agent
from catalog.models import ComputePackage, HostCostProfile
from clickhouse_store.queries.billing import (
    LayerTimes,
    busy_l3_us,
    expert_shares,
    layer_times,
    subtree_shares,
)
from common.money import MINOR_UNITS, round_money
from scheduling.selectors import Loan, loans

from .cost_split import Rates, allocate
from .models import Invoice, Note

ZERO = Decimal(0)
US_PER_HOUR = Decimal(3_600_000_000)
GROUPS = ("contract", "package", "tenant")  # LayerTimes fields
REVENUE_STATUSES = (Invoice.Status.FINALIZED, Invoice.Status.PAID)
_REVENUE_FIELDS = {
    "contract": "contract__code",
    "package": "contract__package__code",
    "tenant": "tenant__code",
}


@dataclass(frozen=True)
class CostRow:
    key: str
    requests: int
    cost: Decimal
    unpriced_requests: int  # served by hosts without a cost profile: their cost is unknown, not zero
    revenue: Decimal
    loan_cost: Decimal = ZERO  # of ``cost``: executors borrowed, held and idle (``loan_charges``)

    @property
    def cost_per_request(self) -> Decimal | None:
        priced = self.requests - self.unpriced_requests
        return (self.cost / priced).quantize(Decimal("1E-6")) if priced else None

    @property
    def gross_margin(self) -> Decimal | None:
        """(revenue − cost) / revenue; None without revenue or while some cost is unknown."""
        if not self.revenue or self.unpriced_requests:
            return None
        return ((self.revenue - self.cost) / self.revenue).quantize(Decimal("1E-4"))


def rates_of(profile: HostCostProfile) -> Rates:
    """A host class's cost per hour of each layer's time."""
    return Rates(profile.depreciation_per_hour + profile.power_per_hour, profile.operations_per_hour)


def record_cost(profile: HostCostProfile, l3_us: int, l1_l2_us: int) -> Decimal:
    gpu = (profile.depreciation_per_hour + profile.power_per_hour) * Decimal(l3_us)
    return (gpu + profile.operations_per_hour * Decimal(l1_l2_us)) / US_PER_HOUR


def _attributed(
    start: datetime, end: datetime, package: str = "", *, sandbox: bool = False
) -> list[tuple[LayerTimes, Decimal | None]]:
    """Each (agent, tenant, contract, package) row with its cost, None where the host has no profile."""
    rows = layer_times(start, end, package, sandbox=sandbox)
    host_of = dict(Agent.objects.values_list("agent_id", "host_class"))
    profiles = {p.host_class: p for p in HostCostProfile.objects.all()}
    attributed = []
    for row in rows:
        profile = profiles.get(host_of.get(row.agent_id, ""))
        attributed.append((row, None if profile is None else record_cost(profile, row.l3_us, row.l1_l2_us)))
    return attributed


@dataclass(frozen=True)
class LoanCharge:
    """One contract's part of a loan's idle held cost."""

    loan: Loan
    tenant: str
    contract: str
    package: str
    cost: Decimal


def loan_charges(start: datetime, end: datetime, now: datetime | None = None) -> list[LoanCharge]:
    """The loans' idle held cost in [start, end), per borrowing contract (see the module's docstring).
    A loan not returned is held until ``now``; an executor whose host class has no cost profile costs
    nothing here (its records are counted as unpriced above)."""
    now = now or timezone.now()
    host_of = dict(Agent.objects.values_list("agent_id", "host_class"))
    profiles = {p.host_class: p for p in HostCostProfile.objects.all()}
    charges: list[LoanCharge] = []
    for loan in loans(start, end):
        held_from, held_to = max(loan.start, start), min(loan.end or now, end)
        if held_to <= held_from:
            continue
        held_us = int((held_to - held_from).total_seconds() * 1_000_000)
        busy = busy_l3_us(loan.executors, held_from, held_to)
        idle = ZERO
        for executor in loan.executors:
            profile = profiles.get(host_of.get(executor, ""))
            if profile is not None:
                idle += record_cost(profile, max(0, held_us - busy.get(executor, 0)), 0)
        shares = subtree_shares(loan.borrower, loan.start, loan.end or now)
        total = sum(share.requests for share in shares)
        if not idle or not total:
            continue
        charges.extend(
            LoanCharge(loan, share.tenant, share.contract, share.package, idle * share.requests / total)
            for share in shares
        )
    return charges


def cost_report(start: datetime, end: datetime, by: str = "contract") -> list[CostRow]:
    """Cost, cost per request, revenue and gross margin per contract, package or tenant, for [start, end).
    Costs are in the profiles' currency, and so is the revenue: other currencies' invoices are left out
    (all of them while the profiles use several currencies, or none exist)."""
    if by not in GROUPS:
        raise ValueError(f"group by one of {', '.join(GROUPS)}, not {by!r}")
    requests: dict[str, int] = defaultdict(int)
    unpriced: dict[str, int] = defaultdict(int)
    cost: dict[str, Decimal] = defaultdict(Decimal)
    for row, row_cost in _attributed(start, end):
        key: str = getattr(row, by)
        requests[key] += row.requests
        if row_cost is None:
            unpriced[key] += row.requests
        else:
            cost[key] += row_cost
    lent: dict[str, Decimal] = defaultdict(Decimal)
    for charge in loan_charges(start, end):
        key = getattr(charge, by)
        lent[key] += charge.cost
        cost[key] += charge.cost
    revenue = _revenue(start, end, by)
    return [
        CostRow(key, requests[key], cost[key], unpriced[key], revenue.get(key, ZERO), lent[key])
        for key in sorted(set(requests) | set(revenue) | set(lent))
    ]


def _revenue(start: datetime, end: datetime, by: str) -> dict[str, Decimal]:
    currency = cost_currency()
    if currency is None:
        return {}
    revenue = net_revenue_by(_REVENUE_FIELDS[by], start, end, currency)
    return {key: amount for (key, _), amount in revenue.items()}


def cost_currency() -> str | None:
    """The currency host costs are kept in, or None while the profiles use several (or none exist)."""
    found = set(HostCostProfile.objects.values_list("currency", flat=True))
    return found.pop() if len(found) == 1 else None


def revenue_invoices(start: datetime | None, end: datetime | None, currency: str = "") -> QuerySet[Invoice]:
    """The issued invoices (finalised or paid) of periods starting in [start, end) (None: unbounded),
    in `currency` ("": any)."""
    rows = Invoice.objects.filter(status__in=REVENUE_STATUSES)
    if start is not None:
        rows = rows.filter(period_start__gte=start)
    if end is not None:
        rows = rows.filter(period_start__lt=end)
    if currency:
        rows = rows.filter(currency=currency)
    return rows


def net_revenue_by(
    field: str, start: datetime, end: datetime, currency: str = ""
) -> dict[tuple[str, str], Decimal]:
    """(the invoice's `field`, currency) → net revenue of `revenue_invoices`: subtotals less credit
    notes plus debit notes. Two aggregates (invoices, notes), so notes never multiply invoice sums."""
    selected = revenue_invoices(start, end, currency)
    billed = selected.values(field, "currency").annotate(total=Sum("subtotal"))
    noted = (
        Note.objects.filter(invoice__in=selected)
        .values(f"invoice__{field}", "invoice__currency")
        .annotate(change=Sum(Case(When(kind=Note.Kind.CREDIT, then=-F("amount")), default=F("amount"))))
    )
    revenue = {(r[field], r["currency"]): r["total"] for r in billed}
    for r in noted:
        key = (r[f"invoice__{field}"], r["invoice__currency"])
        revenue[key] = revenue.get(key, ZERO) + r["change"]
    return revenue


def suggested_base_fee(
    package: ComputePackage, start: datetime, end: datetime, currency: str = "CNY"
) -> Decimal:
    """The package's cost per contract that used it in [start, end), × its margin factor (default 1.3)."""
    attributed = _attributed(start, end, package.code)
    contracts = {row.contract for row, _ in attributed}
    total = sum((row_cost for _, row_cost in attributed if row_cost is not None), ZERO)
    if not contracts:
        return ZERO
    return round_money(total / len(contracts) * package.margin_factor, currency)


@dataclass(frozen=True)
class CallCost:
    calls: int  # successful calls on hosts with a cost profile
    cost: Decimal  # their cost, exact


def sandbox_call_cost(package: ComputePackage, start: datetime, end: datetime) -> CallCost | None:
    """What the package's successful calls in customer sandboxes over [start, end) cost (hosts with a
    cost profile only); None without any: the cost per event a sandbox measures for a new package."""
    priced = [
        (row, cost) for row, cost in _attributed(start, end, package.code, sandbox=True) if cost is not None
    ]
    calls = sum(row.requests for row, _ in priced)
    return CallCost(calls, sum((cost for _, cost in priced), ZERO)) if calls else None


UNATTRIBUTED = "unattributed"  # the expert split's row for the L2 and L3 cost of requests without experts


@dataclass(frozen=True)
class SplitRow:
    """One part of a period's cost: a layer (`L1` routing, `L2` expert cache, `L3` experts), an expert
    (`<model> layer <l> expert <e>`) or `unattributed`, and how many requests it served (None for the
    unattributed part: the requests without experts are not counted)."""

    key: str
    requests: int | None
    cost: Decimal


@dataclass(frozen=True)
class PeriodCostSplit:
    """A period's cost of successful requests on priced hosts (without loans), split by layer and by
    expert with `cost_split`'s rules, each split adding up to `total` (rounded to the currency's minor
    unit) exactly; the L2 and L3 cost of requests without experts is its own row of the expert split."""

    currency: str
    total: Decimal
    requests: int
    unpriced_requests: int
    by_layer: list[SplitRow]
    by_expert: list[SplitRow]


def period_cost_split(start: datetime, end: datetime) -> PeriodCostSplit | None:
    """[start, end)'s cost split by layer and by expert; None while the cost profiles use several
    currencies (or none exist). Two ClickHouse queries (layer times and expert shares per agent)."""
    currency = cost_currency()
    if currency is None:
        return None
    host_of = dict(Agent.objects.values_list("agent_id", "host_class"))
    profiles = {p.host_class: rates_of(p) for p in HostCostProfile.objects.all()}
    rates = {agent: profiles[host] for agent, host in host_of.items() if host in profiles}
    layers = dict.fromkeys(("L1", "L2", "L3"), ZERO)
    requests = unpriced = 0
    for row in layer_times(start, end):
        rate = rates.get(row.agent_id)
        if rate is None:
            unpriced += row.requests
            continue
        requests += row.requests
        layers["L1"] += row.l1_us * rate.per_us("L1")
        layers["L2"] += (row.l1_l2_us - row.l1_us) * rate.per_us("L2")
        layers["L3"] += row.l3_us * rate.per_us("L3")
    experts: dict[str, Decimal] = defaultdict(Decimal)
    used: dict[str, int] = defaultdict(int)
    for share in expert_shares(start, end):
        rate = rates.get(share.agent_id)
        if rate is None:
            continue
        key = f"{share.model_id} layer {share.layer} expert {share.expert}"
        experts[key] += share.l3_us * rate.per_us("L3") + share.l2_us * rate.per_us("L2")
        used[key] += share.requests
    unit = Decimal(1).scaleb(-MINOR_UNITS[currency])
    total = round_money(sum(layers.values(), ZERO), currency)
    by_layer = allocate(total, list(layers.values()), unit)
    keys = sorted(experts)
    without = layers["L2"] + layers["L3"] - sum(experts.values(), ZERO)
    by_expert = allocate(by_layer[1] + by_layer[2], [*(experts[k] for k in keys), max(without, ZERO)], unit)
    return PeriodCostSplit(
        currency,
        total,
        requests,
        unpriced,
        [SplitRow(layer, requests, cost) for layer, cost in zip(layers, by_layer, strict=True)],
        [SplitRow(k, used[k], cost) for k, cost in zip(keys, by_expert, strict=False)]
        + [SplitRow(UNATTRIBUTED, None, by_expert[-1])],
    )
