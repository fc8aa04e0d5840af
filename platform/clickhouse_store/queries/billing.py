"""Billing's SQL: the rating aggregate, the outcome records and their rule, the cost attribution, and
the stored records a dispute names.

Rating is one aggregate query: every contract of an invoice run and every dimension and custom metric
in one GROUP BY over the deduplicated records; never a Python loop over records. A contract whose
prices change within the period is also grouped by price segment (a `segment` column counting the
change instants at or before each record's start), still in that one query.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple
from uuid import UUID

from clickhouse_store import query
from pricing.dimensions import AGGREGATED_DIMENSIONS, Dimension
from pricing.expressions import Metric
from treemeter_records.timeutil import unix_nanos

from .metric_sql import metric_sql

# Integer aggregates over the records table, one per dimension of pricing.dimensions.AGGREGATED_DIMENSIONS
# (in that order); values are summed exactly, then scaled by pricing. Hops are counted from the array's
# size subcolumn: under FINAL `length(hops)` reads every hop (this sum over 10M records: 0.47 s, against
# 0.04 s).
AGGREGATE_SQL: dict[str, str] = {
    Dimension.REQUESTS: "count()",
    Dimension.TOKENS_IN: "sum(tokens_in)",
    Dimension.TOKENS_OUT: "sum(tokens_out)",
    Dimension.CACHED_TOKENS: "sum(prefix_cache_hit_tokens)",
    Dimension.EXPERT_TOKENS: "sum(expert_tokens)",
    Dimension.ROUTING_HOPS: "sum(hops.size0)",
    Dimension.L2_MISSES: "sum(expert_cache_misses)",
    Dimension.L3_SECONDS: "sum(l3_latency_us)",
    Dimension.DISTINCT_EXPERTS: "sum(distinct_experts)",
}
if tuple(AGGREGATE_SQL) != AGGREGATED_DIMENSIONS:
    raise RuntimeError("AGGREGATE_SQL must map exactly pricing.dimensions.AGGREGATED_DIMENSIONS, in order")

_OK = "status = 'ok' AND NOT disputed AND NOT paused"
# A custom metric's per-record value (Float64) as an exact decimal of 18 places, so the period's sum is
# exact and does not depend on the order the engine adds in: a Float64 sum's last bits vary between
# identical runs, and 1e16 + 1 - 1e16 is 0 or 1 by order. Values beyond ±1e58 fail the query.
METRIC_VALUE = "toDecimal256({}, 18)"

# Bound-parameter SQL over one record: whether a dispute excluded it, whether an SLA pause covers it.
DISPUTED = "has({ex_ids:Array(UUID)}, record_id)"
PAUSED = (
    "arrayExists((c, s, e, f) -> contract = c AND start_ns >= s AND start_ns < e "
    "AND (f = 0 OR status IN ('error', 'timeout')), "
    "{pz_contracts:Array(String)}, {pz_starts:Array(Int64)}, {pz_ends:Array(Int64)}, "
    "{pz_failed_only:Array(UInt8)})"
)
# Which price segment a record falls in: how many of its contract's change instants are at or before it.
SEGMENT = (
    "arrayCount((c, b) -> contract = c AND start_ns >= b, "
    "{sg_contracts:Array(String)}, {sg_bounds:Array(Int64)}) AS segment"
)


@dataclass(frozen=True)
class RatedContract:
    """One contract of the rating query: its tenant and code, its custom metrics, and the instants
    inside the period where a price changes (its usage is then also grouped per segment)."""

    tenant: str
    contract: str
    metrics: tuple[Metric, ...] = ()
    bounds: tuple[datetime, ...] = ()


@dataclass(frozen=True)
class PauseWindow:
    """[starts_at, ends_at) of one contract's records, every record or only the failed ones."""

    contract: str
    starts_at: datetime
    ends_at: datetime
    failed_only: bool


@dataclass(frozen=True)
class Excluded:
    """What the rating query leaves out: these record ids (disputes) and the records in these windows."""

    record_ids: tuple[str, ...] = ()
    pauses: tuple[PauseWindow, ...] = ()


@dataclass(frozen=True)
class UsageRow:
    """One (tenant, contract, segment) group of the rating query: all its records, those a dispute or
    a pause left out, each dimension's integer aggregate and each custom metric's exact sum (by its
    expression text) over the billable ones (ok, not excluded)."""

    tenant: str
    contract: str
    segment: int
    records: int
    by_dispute: int
    by_pause: int
    aggregates: dict[str, int]
    metrics: dict[str, Decimal]


def usage_sql(
    contracts: Sequence[RatedContract], start: datetime, end: datetime, excluded: Excluded = Excluded()
) -> tuple[str, dict[str, Any], dict[str, int]]:
    """The one GROUP BY query for these contracts over [start, end), its parameters, and the column
    of each distinct custom metric expression (contracts sharing an expression share one column).
    Built from our own constant expressions and rendered metrics only; tenants, contracts, period,
    numbers and the excluded record ids and paused windows are bound parameters."""
    in_period, period = query.in_period(start, end)
    params: dict[str, Any] = {
        "tenants": sorted({c.tenant for c in contracts}),
        "contracts": [c.contract for c in contracts],
        **period,
    }
    # What the period does not have is a constant, not a per-row lambda over empty arrays (a fifth of
    # the query's time over a month of records).
    disputed, paused, segment = "0", "0", "0 AS segment"
    if excluded.record_ids:
        disputed = DISPUTED
        params["ex_ids"] = sorted(excluded.record_ids)
    if excluded.pauses:
        paused = PAUSED
        params["pz_contracts"] = [x.contract for x in excluded.pauses]
        params["pz_starts"] = [unix_nanos(x.starts_at) for x in excluded.pauses]
        params["pz_ends"] = [unix_nanos(x.ends_at) for x in excluded.pauses]
        params["pz_failed_only"] = [1 if x.failed_only else 0 for x in excluded.pauses]
    if any(c.bounds for c in contracts):
        segment = SEGMENT
        params["sg_contracts"] = [c.contract for c in contracts for _ in c.bounds]
        params["sg_bounds"] = [unix_nanos(b) for c in contracts for b in c.bounds]
    columns = [f"{expr} FILTER (WHERE {_OK})" for expr in AGGREGATE_SQL.values()]
    users: dict[str, tuple[Metric, list[str]]] = {}
    for rated in contracts:
        for metric in rated.metrics:
            users.setdefault(metric.expression, (metric, []))[1].append(rated.contract)
    metric_column: dict[str, int] = {}
    for k, (expression, (metric, codes)) in enumerate(users.items()):
        rendered = metric_sql(metric, param_prefix=f"m{k}p")
        params.update(rendered.params)
        params[f"m{k}c"] = sorted(set(codes))
        in_metric = f"{_OK} AND contract IN {{m{k}c:Array(String)}}"
        value, zero = METRIC_VALUE.format(rendered.sql), METRIC_VALUE.format("0")
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


_FIRST_AGGREGATE = 5  # after tenant, contract, records, by_dispute, by_pause


def usage_rows(
    contracts: Sequence[RatedContract], start: datetime, end: datetime, excluded: Excluded
) -> list[UsageRow]:
    """The rating query's groups (`usage_sql`), one per (tenant, contract, segment) with records. A
    group's tenant may differ from its contract's: the caller keeps only the contract's own."""
    sql, params, metric_column = usage_sql(contracts, start, end, excluded)
    first_metric = _FIRST_AGGREGATE + len(AGGREGATED_DIMENSIONS)
    return [
        UsageRow(
            row[0],
            row[1],
            int(row[-1]),
            int(row[2]),
            int(row[3]),
            int(row[4]),
            {d: int(row[_FIRST_AGGREGATE + k] or 0) for k, d in enumerate(AGGREGATED_DIMENSIONS)},
            {e: Decimal(row[first_metric + k] or 0) for e, k in metric_column.items()},
        )
        for row in query.select(sql, params)
    ]


class LayerTimes(NamedTuple):
    """Successful requests of one (agent, tenant, contract, package) and their layer times (µs)."""

    agent_id: str
    tenant: str
    contract: str
    package: str
    requests: int
    l3_us: int
    l1_l2_us: int


_COST_SQL = (
    "SELECT agent_id, tenant, contract, package, count(), sum(l3_latency_us), "  # noqa: S608
    f"sum(l1_latency_us + l2_latency_us) FROM {query.RECORDS} "
    "WHERE status = 'ok' AND start_time >= {start:DateTime64(9, 'UTC')} "
    "AND start_time < {end:DateTime64(9, 'UTC')} AND ({package:String} = '' OR package = {package:String}) "
    "GROUP BY agent_id, tenant, contract, package"
)


def layer_times(start: datetime, end: datetime, package: str = "") -> list[LayerTimes]:
    """The layer times of [start, end)'s successful records per (agent, tenant, contract, package), of
    one package ("": all); one query, the costs are applied per agent by the caller."""
    rows = query.select(_COST_SQL, {"start": start, "end": end, "package": package})
    return [LayerTimes(a, t, c, p, int(n), int(l3), int(l1_l2)) for a, t, c, p, n, l3, l1_l2 in rows]


# The record fields a rule sees, plus the period's latency percentiles and error rate per contract.
# Our own constant SQL; tenant, contract and period are bound parameters.
_RULE_SOURCE = (
    "SELECT *, start_time, l1_latency_us, l2_latency_us, l3_latency_us, "  # noqa: S608
    "(toFloat64(end_ns - start_ns) / 1000000.) AS latency_ms_, "
    "quantileExact(0.5)(latency_ms_) OVER () AS p50_latency_ms, "
    "quantileExact(0.99)(latency_ms_) OVER () AS p99_latency_ms, "
    "avg(toFloat64(status != 'ok')) OVER () AS error_rate "
    f"FROM {query.RECORDS} "
    "WHERE tenant = {tenant:String} AND contract = {contract:String} "
    "AND start_time >= {start:DateTime64(9, 'UTC')} AND start_time < {end:DateTime64(9, 'UTC')}"
)


class OutcomeRecord(NamedTuple):
    """A successful record of the period that declares an outcome, and whether the rule holds for it."""

    record_id: UUID
    ref: str
    kind: str
    value: str
    start_time: datetime  # as the engine returns it: UTC, without a zone
    holds: int


def outcome_records(
    tenant: str, contract: str, start: datetime, end: datetime, rule: Metric | None
) -> list[OutcomeRecord]:
    """The contract's successful records of [start, end) carrying an outcome, by start time, each with
    whether `rule` (None: never) holds for it; one query."""
    rule_sql, params = "0", {}
    if rule is not None:
        rendered = metric_sql(rule, "r")
        rule_sql, params = rendered.sql, rendered.params
    sql = (
        "SELECT record_id, JSONExtractString(outcome, 'ref'), JSONExtractString(outcome, 'type'), "  # noqa: S608
        f"JSONExtractString(outcome, 'value'), start_time, toUInt8(({rule_sql}) != 0) "
        f"FROM ({_RULE_SOURCE}) WHERE outcome != '' AND status = 'ok' ORDER BY start_time, record_id"
    )
    rows = query.select(sql, {**params, "tenant": tenant, "contract": contract, "start": start, "end": end})
    return [OutcomeRecord(*row) for row in rows]


_RECORD_STARTS = (
    f"SELECT toString(record_id), start_ns FROM {query.RECORDS} "  # noqa: S608 - constant SQL
    "WHERE tenant = {tenant:String} AND contract = {contract:String} "
    "AND start_ns >= {start:Int64} AND start_ns < {end:Int64} AND "
)


def named_record_starts(
    tenant: str, contract: str, start_ns: int, end_ns: int, record_ids: Sequence[str]
) -> list[tuple[str, int]]:
    """(record id, start_ns) of the contract's stored records in [start_ns, end_ns) among `record_ids`."""
    rows = query.select(
        _RECORD_STARTS + "toString(record_id) IN {ids:Array(String)}",
        {"tenant": tenant, "contract": contract, "start": start_ns, "end": end_ns, "ids": list(record_ids)},
    )
    return [(str(record_id), int(start)) for record_id, start in rows]


def window_record_starts(
    tenant: str, contract: str, start_ns: int, end_ns: int, wstart_ns: int, wend_ns: int, status: str
) -> list[tuple[str, int]]:
    """(record id, start_ns) of the contract's stored records in [start_ns, end_ns) that start in
    [wstart_ns, wend_ns) with this status."""
    rows = query.select(
        _RECORD_STARTS
        + "start_ns >= {wstart:Int64} AND start_ns < {wend:Int64} AND status = {status:String}",
        {
            "tenant": tenant,
            "contract": contract,
            "start": start_ns,
            "end": end_ns,
            "wstart": wstart_ns,
            "wend": wend_ns,
            "status": status,
        },
    )
    return [(str(record_id), int(start)) for record_id, start in rows]


def record_aggregates(tenant: str, contract: str, record_ids: Sequence[str]) -> dict[str, int]:
    """Each dimension's integer aggregate (`AGGREGATE_SQL`) over these records of the contract that
    succeeded (only `ok` is billed); one query."""
    columns = ", ".join(f"{expression} FILTER (WHERE status = 'ok')" for expression in AGGREGATE_SQL.values())
    [row] = query.select(
        f"SELECT {columns} FROM {query.RECORDS} "  # noqa: S608 - constant SQL
        "WHERE tenant = {tenant:String} AND contract = {contract:String} "
        "AND toString(record_id) IN {ids:Array(String)}",
        {"tenant": tenant, "contract": contract, "ids": list(record_ids)},
    )
    return {d: int(v or 0) for d, v in zip(AGGREGATED_DIMENSIONS, row, strict=True)}
