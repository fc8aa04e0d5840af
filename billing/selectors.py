"""Reads for billing: usage aggregates from ClickHouse, invoices from PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from clickhouse_store import query
from contracts.dimensions import AGGREGATES, quantity_from_aggregate

from .models import Invoice

_DIMENSIONS = list(AGGREGATES)
# Built from our own constant expressions only; every value is a bound parameter.
# No value is pasted into the SQL: tenant, contract and period are bound parameters.
_USAGE_SQL = (
    "SELECT count() AS records, "  # noqa: S608
    + ", ".join(f"{expr} FILTER (WHERE status = 'ok')" for expr in AGGREGATES.values())
    + f" FROM {query.RECORDS} "
    "WHERE tenant = {tenant:String} AND contract = {contract:String} "
    "AND start_time >= {start:DateTime64(9, 'UTC')} AND start_time < {end:DateTime64(9, 'UTC')}"
)


@dataclass(frozen=True)
class PeriodUsage:
    record_count: int
    quantities: dict[str, Decimal]


def period_usage(tenant: str, contract: str, start: datetime, end: datetime) -> PeriodUsage:
    """One aggregate query over the deduplicated records: only successful requests are billable."""
    (row,) = query.select(_USAGE_SQL, {"tenant": tenant, "contract": contract, "start": start, "end": end})
    return PeriodUsage(
        record_count=int(row[0]),
        quantities={
            d: quantity_from_aggregate(d, int(v or 0)) for d, v in zip(_DIMENSIONS, row[1:], strict=True)
        },
    )


def invoice_with_lines(invoice_id: int) -> Invoice:
    return (
        Invoice.objects.select_related("contract", "tenant", "contract__package")
        .prefetch_related("lines")
        .get(pk=invoice_id)
    )
