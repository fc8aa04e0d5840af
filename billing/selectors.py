"""Reads for billing: usage aggregates from ClickHouse, invoices from PostgreSQL.

Rating is one aggregate query: every contract of an invoice run and every dimension and custom metric
in one GROUP BY over the deduplicated records; never a Python loop over records.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.apps import apps
from django.db.models import QuerySet, Sum

from clickhouse_store import query
from contracts.dimensions import AGGREGATES, quantity_from_aggregate

from .exclusions import DISPUTED, PAUSED, RatingExclusions, rating_exclusions
from .expressions import compile_metric
from .models import CreditEntry, Invoice, Note, Outcome
from .rating import PeriodUsage

_DIMENSIONS = list(AGGREGATES)
_FIRST_DIMENSION = 5  # after tenant, contract, records, by_dispute, by_pause
_OK = "status = 'ok' AND NOT disputed AND NOT paused"
METRIC_PLACES = Decimal("0.000001")


@dataclass(frozen=True)
class ContractMeter:
    """What to measure for one contract: its tenant and code, and its custom metric expressions."""

    tenant: str
    contract: str
    metrics: dict[str, str]


def usage_sql(
    meters: Sequence[ContractMeter], exclusions: RatingExclusions | None = None
) -> tuple[str, dict[str, Any], dict[str, int]]:
    """The one GROUP BY query for these contracts, and the column of each distinct custom metric
    expression (contracts sharing an expression share one column). Built from our own constant
    expressions and compiled metrics only; tenants, contracts, period, numbers and the excluded record
    ids and paused windows (`billing.exclusions`) are bound parameters."""
    params: dict[str, Any] = {
        "tenants": sorted({m.tenant for m in meters}),
        "contracts": [m.contract for m in meters],
        **(exclusions or RatingExclusions()).params(),
    }
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
        columns.append(f"sum(if({_OK} AND contract IN {{m{k}c:Array(String)}}, {compiled.sql}, 0.))")
        metric_column[expression] = k
    sql = (
        f"WITH {DISPUTED} AS disputed, {PAUSED} AS paused "  # noqa: S608
        "SELECT tenant, contract, count() AS records, "
        "countIf(disputed) AS by_dispute, countIf(paused AND NOT disputed) AS by_pause, "
        + ", ".join(columns)
        + f" FROM {query.RECORDS} "
        "WHERE tenant IN {tenants:Array(String)} AND contract IN {contracts:Array(String)} "
        "AND start_time >= {start:DateTime64(9, 'UTC')} AND start_time < {end:DateTime64(9, 'UTC')} "
        "GROUP BY tenant, contract"
    )
    return sql, params, metric_column


def usage_by_contract(
    meters: Sequence[ContractMeter], start: datetime, end: datetime, as_of: datetime | None = None
) -> dict[str, PeriodUsage]:
    """Each contract's period usage (only successful, not excluded requests are billable; record_count
    counts all). A contract without records gets zero usage. Records under another tenant's code are
    not counted. `as_of`: only exclusions made by then apply (`billing.exclusions`)."""
    if not meters:
        return {}
    owner = {m.contract: m.tenant for m in meters}
    exclusions = rating_exclusions(owner, start, end, as_of)
    sql, params, metric_column = usage_sql(meters, exclusions)
    rows = query.select(sql, {**params, "start": start, "end": end})
    found: dict[str, tuple[Any, ...]] = {row[1]: row for row in rows if owner.get(row[1]) == row[0]}
    usage = {}
    first_metric = _FIRST_DIMENSION + len(_DIMENSIONS)
    for meter in meters:
        row = found.get(meter.contract)
        quantities = {
            d: quantity_from_aggregate(d, int(row[_FIRST_DIMENSION + k] or 0) if row else 0)
            for k, d in enumerate(_DIMENSIONS)
        }
        for code, expression in meter.metrics.items():
            raw = row[first_metric + metric_column[expression]] if row else 0.0
            quantities[code] = Decimal(repr(float(raw or 0.0))).quantize(METRIC_PLACES)
        excluded = exclusions.describe(meter.contract, int(row[3]) if row else 0, int(row[4]) if row else 0)
        usage[meter.contract] = PeriodUsage(int(row[2]) if row else 0, quantities, excluded=excluded)
    return usage


def period_usage(
    tenant: str,
    contract: str,
    start: datetime,
    end: datetime,
    metrics: dict[str, str] | None = None,
    as_of: datetime | None = None,
) -> PeriodUsage:
    """One contract's usage for [start, end)."""
    return usage_by_contract([ContractMeter(tenant, contract, metrics or {})], start, end, as_of)[contract]


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
    the ledger app is absent or has published none."""
    if not apps.is_installed("ledger"):
        return None
    checkpoint = apps.get_model("ledger", "Checkpoint").objects.order_by("-size", "-id").first()
    if checkpoint is None:
        return None
    return {"size": checkpoint.size, "root_hash": base64.b64encode(bytes(checkpoint.root_hash)).decode()}
