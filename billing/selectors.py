"""Reads for billing: usage aggregates from ClickHouse, invoices from PostgreSQL.

Rating is one aggregate query: every contract of an invoice run and every dimension and custom metric
in one GROUP BY over the deduplicated records; never a Python loop over records. A contract whose
prices change within the period is also grouped by price segment (a `segment` column counting the
change instants at or before each record's start), still in that one query.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet, Sum

from clickhouse_store import query
from ledger.models import Checkpoint
from pricing.dimensions import AGGREGATES, quantity_from_aggregate
from pricing.expressions import compile_metric
from treemeter_records.timeutil import unix_nanos

from .exclusions import DISPUTED, PAUSED, RatingExclusions, rating_exclusions
from .models import CreditEntry, Invoice, Note, Outcome
from .rating import PeriodUsage, SegmentUsage

_DIMENSIONS = list(AGGREGATES)
_FIRST_DIMENSION = 5  # after tenant, contract, records, by_dispute, by_pause
_OK = "status = 'ok' AND NOT disputed AND NOT paused"
METRIC_PLACES = Decimal("0.000001")
# A custom metric's per-record value (Float64) as an exact decimal of 18 places, so the period's sum is
# exact and does not depend on the order the engine adds in: a Float64 sum's last bits vary between
# identical runs, and 1e16 + 1 - 1e16 is 0 or 1 by order. Values beyond ±1e58 fail the query.
METRIC_VALUE = "toDecimal256({}, 18)"


@dataclass(frozen=True)
class ContractMeter:
    """What to measure for one contract: its tenant and code, its custom metric expressions, and the
    instants inside the period where a price changes (usage is then also measured per segment)."""

    tenant: str
    contract: str
    metrics: dict[str, str]
    bounds: tuple[datetime, ...] = ()


# Which price segment a record falls in: how many of its contract's change instants are at or before it.
SEGMENT = (
    "arrayCount((c, b) -> contract = c AND start_ns >= b, "
    "{sg_contracts:Array(String)}, {sg_bounds:Array(Int64)}) AS segment"
)


def usage_sql(
    meters: Sequence[ContractMeter],
    start: datetime,
    end: datetime,
    exclusions: RatingExclusions | None = None,
) -> tuple[str, dict[str, Any], dict[str, int]]:
    """The one GROUP BY query for these contracts over [start, end), its parameters, and the column
    of each distinct custom metric expression (contracts sharing an expression share one column).
    Built from our own constant expressions and compiled metrics only; tenants, contracts, period,
    numbers and the excluded record ids and paused windows (`billing.exclusions`) are bound
    parameters."""
    in_period, period = query.in_period(start, end)
    params: dict[str, Any] = {
        "tenants": sorted({m.tenant for m in meters}),
        "contracts": [m.contract for m in meters],
        **period,
    }
    # What the period does not have is a constant, not a per-row lambda over empty arrays (a fifth of
    # the query's time over a month of records).
    excluded = (exclusions or RatingExclusions()).params()
    disputed, paused, segment = "0", "0", "0 AS segment"
    if excluded["ex_ids"]:
        disputed = DISPUTED
        params["ex_ids"] = excluded["ex_ids"]
    if excluded["pz_contracts"]:
        paused = PAUSED
        params.update({k: v for k, v in excluded.items() if k.startswith("pz_")})
    if any(m.bounds for m in meters):
        segment = SEGMENT
        params["sg_contracts"] = [m.contract for m in meters for _ in m.bounds]
        params["sg_bounds"] = [unix_nanos(b) for m in meters for b in m.bounds]
    columns = [f"{expr} FILTER (WHERE {_OK})" for expr in AGGREGATES.values()]
    users: dict[str, list[str]] = {}
    for meter in meters:
        for expression in meter.metrics.values():
            users.setdefault(expression, []).append(meter.contract)
    metric_column: dict[str, int] = {}
    for k, (expression, contracts) in enumerate(users.items()):
        compiled = compile_metric(expression, param_prefix=f"m{k}p")
        params.update(compiled.params)
        params[f"m{k}c"] = sorted(set(contracts))
        in_metric = f"{_OK} AND contract IN {{m{k}c:Array(String)}}"
        value, zero = METRIC_VALUE.format(compiled.sql), METRIC_VALUE.format("0")
        columns.append(f"sum(if({in_metric}, {value}, {zero}))")
        metric_column[expression] = k
    sql = (
        f"WITH {disputed} AS disputed, {paused} AS paused "  # noqa: S608
        "SELECT tenant, contract, count() AS records, "
        "countIf(disputed) AS by_dispute, countIf(paused AND NOT disputed) AS by_pause, "
        + ", ".join(columns)
        + f", {segment} FROM {query.RECORDS} "
        "WHERE tenant IN {tenants:Array(String)} AND contract IN {contracts:Array(String)} "
        f"AND {in_period} GROUP BY tenant, contract, segment"
    )
    return sql, params, metric_column


def usage_by_contract(
    meters: Sequence[ContractMeter], start: datetime, end: datetime, as_of: datetime | None = None
) -> dict[str, PeriodUsage]:
    """Each contract's period usage (only successful, not excluded requests are billable; record_count
    counts all), and per price segment for a meter with bounds. A contract without records gets zero
    usage. Records under another tenant's code are not counted. `as_of`: only exclusions made by then
    apply (`billing.exclusions`)."""
    if not meters:
        return {}
    owner = {m.contract: m.tenant for m in meters}
    exclusions = rating_exclusions(owner, start, end, as_of)
    sql, params, metric_column = usage_sql(meters, start, end, exclusions)
    rows = query.select(sql, params)
    found: dict[str, dict[int, tuple[Any, ...]]] = {}
    for row in rows:
        if owner.get(row[1]) == row[0]:
            found.setdefault(row[1], {})[int(row[-1])] = row
    usage = {}
    for meter in meters:
        by_segment = found.get(meter.contract, {})
        total = _summed(list(by_segment.values()))
        edges = [start, *meter.bounds, end]
        segments = tuple(
            SegmentUsage(edges[k], edges[k + 1], _quantities(meter, by_segment.get(k), metric_column))
            for k in range(len(meter.bounds) + 1)
        )
        excluded = exclusions.describe(
            meter.contract, int(total[3]) if total else 0, int(total[4]) if total else 0
        )
        usage[meter.contract] = PeriodUsage(
            int(total[2]) if total else 0,
            _quantities(meter, total, metric_column),
            excluded=excluded,
            segments=segments if meter.bounds else (),
        )
    return usage


def _summed(rows: list[tuple[Any, ...]]) -> tuple[Any, ...] | None:
    """One contract's segment rows added up column by column (after tenant and contract)."""
    if len(rows) <= 1:
        return rows[0] if rows else None
    sums = [sum((row[k] or 0) for row in rows) for k in range(2, len(rows[0]))]
    return (rows[0][0], rows[0][1], *sums)


def _quantities(
    meter: ContractMeter, row: tuple[Any, ...] | None, metric_column: dict[str, int]
) -> dict[str, Decimal]:
    first_metric = _FIRST_DIMENSION + len(_DIMENSIONS)
    quantities = {
        d: quantity_from_aggregate(d, int(row[_FIRST_DIMENSION + k] or 0) if row else 0)
        for k, d in enumerate(_DIMENSIONS)
    }
    for code, expression in meter.metrics.items():
        raw = row[first_metric + metric_column[expression]] if row else 0
        quantities[code] = Decimal(raw or 0).quantize(METRIC_PLACES)
    return quantities


def period_usage(
    tenant: str,
    contract: str,
    start: datetime,
    end: datetime,
    metrics: dict[str, str] | None = None,
    as_of: datetime | None = None,
    bounds: tuple[datetime, ...] = (),
) -> PeriodUsage:
    """One contract's usage for [start, end), also per price segment when `bounds` are given."""
    meter = ContractMeter(tenant, contract, metrics or {}, bounds)
    return usage_by_contract([meter], start, end, as_of)[contract]


def invoice_with_lines(invoice_id: int) -> Invoice:
    return (
        Invoice.objects.select_related("contract", "tenant", "contract__package")
        .prefetch_related("lines", "notes")
        .get(pk=invoice_id)
    )


def visible_invoices(tenant_id: int | None) -> QuerySet[Invoice]:
    """Every invoice for staff (None), else the tenant's own."""
    invoices = Invoice.objects.select_related("contract", "tenant")
    return invoices if tenant_id is None else invoices.filter(tenant_id=tenant_id)


def visible_credit_notes(tenant_id: int | None) -> QuerySet[Note]:
    notes = Note.objects.filter(kind=Note.Kind.CREDIT).select_related("invoice__contract")
    return notes if tenant_id is None else notes.filter(invoice__tenant_id=tenant_id)


def visible_outcomes(tenant_id: int | None) -> QuerySet[Outcome]:
    outcomes = Outcome.objects.select_related("contract", "credit_note")
    return outcomes if tenant_id is None else outcomes.filter(contract__tenant_id=tenant_id)


def credit_balance(contract_id: int) -> Decimal:
    total = CreditEntry.objects.filter(contract_id=contract_id).aggregate(total=Sum("amount"))["total"]
    return total if total is not None else Decimal("0.00")


def latest_checkpoint() -> dict[str, Any] | None:
    """The newest signed ledger checkpoint (size and root), which a finalised invoice pins; None while
    the ledger has published none."""
    checkpoint = Checkpoint.objects.order_by("-size", "-id").first()
    if checkpoint is None:
        return None
    return {"size": checkpoint.size, "root_hash": base64.b64encode(bytes(checkpoint.root_hash)).decode()}
