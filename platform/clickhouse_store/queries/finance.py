"""The reconciliation's SQL (finance.reconciliation maps the sums to quantities and report rows): per
finalised invoice and metered dimension, the usage the raw records hold, split into the parts the
report explains.

One ClickHouse aggregate covers every invoice of the report (each record finds its invoice by tenant,
contract and period).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pricing.dimensions import AGGREGATED_DIMENSIONS
from treemeter_records.timeutil import unix_nanos

from .. import query
from .billing import AGGREGATE_SQL

PARTS = ("usage_total", "late", "excluded", "disputed")
_CONDITIONS = {
    "usage_total": "billable",
    "late": "billable AND late",
    "excluded": "billable AND NOT late AND rated_out",
    "disputed": "billable AND NOT late AND NOT rated_out AND excluded_after",
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Constant SQL (our own expressions and table); every value is a bound parameter. Each record finds
# its invoice, and its dispute exclusion, through `transform` (a hash lookup built once per block), so
# the cost stays linear in records however many invoices or exclusions the report covers. Billing
# periods are calendar months (common.periods): the invoice key is tenant/contract/YYYYMM, and the
# invoice's own bounds are checked as well.
_SQL = (
    "WITH transform(concat(tenant, '/', contract, '/', toString(toYYYYMM(start_time))), "  # noqa: S608
    "{inv_keys:Array(String)}, {inv_slots:Array(UInt32)}, toUInt32(0)) AS found, "
    "found > 0 AND start_ns >= {inv_starts:Array(Int64)}[found] "
    "AND start_ns < {inv_ends:Array(Int64)}[found] AS in_period, "
    "if(in_period, found, 0) AS slot, "
    "{inv_final_ms:Array(Int64)}[slot] AS final_ms, "
    "toUnixTimestamp64Milli(ingested_at) > final_ms AS late, "
    "transform(toString(record_id), {ex_ids:Array(String)}, {ex_created_ms:Array(Int64)}, toInt64(-1)) "
    "AS ex_created, "
    "ex_created >= 0 AND ex_created <= final_ms AS excluded_before, "
    "ex_created > final_ms AS excluded_after, "
    "arrayExists((c, s, e, f, d) -> contract = c AND start_ns >= s AND start_ns < e "
    "AND (f = 0 OR status IN ('error', 'timeout')) AND d <= final_ms, "
    "{pz_contracts:Array(String)}, {pz_starts:Array(Int64)}, {pz_ends:Array(Int64)}, "
    "{pz_failed_only:Array(UInt8)}, {pz_declared_ms:Array(Int64)}) AS paused, "
    "excluded_before OR paused AS rated_out, "
    "status = 'ok' AS billable "
    "SELECT slot, "
    + ", ".join(
        f"{expression} FILTER (WHERE {_CONDITIONS[part]})"
        for part in PARTS
        for expression in AGGREGATE_SQL.values()
    )
    + f" FROM {query.RECORDS} "
    "WHERE tenant IN {tenants:Array(String)} AND contract IN {contracts:Array(String)} "
    "AND start_time >= {start:DateTime64(9, 'UTC')} AND start_time < {end:DateTime64(9, 'UTC')} "
    "GROUP BY slot HAVING slot > 0"
)


@dataclass(frozen=True)
class InvoicedPeriod:
    """A finalised invoice: the tenant's and contract's records over its period [start, end) (one
    calendar month), finalised at `finalized_at`."""

    tenant: str
    contract: str
    start: datetime
    end: datetime
    finalized_at: datetime


@dataclass(frozen=True)
class ExcludedRecord:
    """A record a dispute excluded from billing, and when."""

    record_id: str
    created_at: datetime


@dataclass(frozen=True)
class BillingPause:
    """A customer-dependency pause of `contract`'s billing over [start, end): all records, or with
    `failed_only` the failed (error, timeout) ones; declared at `declared_at`."""

    contract: str
    start: datetime
    end: datetime
    failed_only: bool
    declared_at: datetime


def _ms(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def _params(
    invoices: Sequence[InvoicedPeriod], excluded: Sequence[ExcludedRecord], pauses: Sequence[BillingPause]
) -> dict[str, Any]:
    return {
        "inv_keys": [f"{i.tenant}/{i.contract}/{i.start.astimezone(UTC):%Y%m}" for i in invoices],
        "inv_slots": list(range(1, len(invoices) + 1)),
        "inv_starts": [unix_nanos(i.start) for i in invoices],
        "inv_ends": [unix_nanos(i.end) for i in invoices],
        "inv_final_ms": [_ms(i.finalized_at) for i in invoices],
        "ex_ids": [x.record_id for x in excluded],
        "ex_created_ms": [_ms(x.created_at) for x in excluded],
        "pz_contracts": [p.contract for p in pauses],
        "pz_starts": [unix_nanos(p.start) for p in pauses],
        "pz_ends": [unix_nanos(p.end) for p in pauses],
        "pz_failed_only": [1 if p.failed_only else 0 for p in pauses],
        "pz_declared_ms": [_ms(p.declared_at) for p in pauses],
        "tenants": sorted({i.tenant for i in invoices}),
        "contracts": sorted({i.contract for i in invoices}),
        "start": min(i.start for i in invoices),
        "end": max(i.end for i in invoices),
    }


def reconciliation_sums(
    invoices: Sequence[InvoicedPeriod], excluded: Sequence[ExcludedRecord], pauses: Sequence[BillingPause]
) -> dict[int, dict[str, dict[str, int]]]:
    """Position in `invoices` → part (PARTS: usage_total, late, excluded, disputed) → dimension
    (pricing.dimensions.AGGREGATED_DIMENSIONS) → the aggregate's integer sum, for the invoices with
    records; one query.

    Of the period's billable (status ok) records: `late` arrived after the invoice was finalised
    (`ingested_at`); `excluded` were rated out before finalisation (an exclusion in `excluded` or a
    pause in `pauses` made by then); `disputed` were excluded in `excluded` after it."""
    if not invoices:
        return {}
    found: dict[int, dict[str, dict[str, int]]] = {}
    for row in query.select(_SQL, _params(invoices, excluded, pauses)):
        values = iter(row[1:])
        found[int(row[0]) - 1] = {
            part: {d: int(next(values) or 0) for d in AGGREGATED_DIMENSIONS} for part in PARTS
        }
    return found
