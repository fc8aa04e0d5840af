"""The usage dashboard's SQL: its reads, the check of the stored rollups against the raw records, and
their rebuild (usage.selectors and usage.services map the rows and choose the path).

Each read takes `stored`: True reads the stored rollup (`usage_hourly`, `usage_experts_daily`;
clickhouse_store.schema), which the caller may choose only when the period's bounds fall on its grain;
False computes the same rollup on the fly from the deduplicated raw records (`query.RECORDS`)
restricted to the exact period. Both paths then run the same outer query, so they answer alike;
tests/usage prove the stored rollups equal the raw records.

Columns are named as in the rollups (the names of schema.USAGE_HOURLY_SUMS and
schema.USAGE_HOURLY_LATENCIES); a name outside them is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any

from .. import query
from ..client import locked_client
from ..schema import (
    LATENCY_QUANTILES,
    NO_INSERT_DEDUP,
    USAGE_EXPERTS_DAILY,
    USAGE_HOURLY,
    USAGE_HOURLY_LATENCIES,
    USAGE_HOURLY_SUMS,
    usage_experts_daily_select,
    usage_hourly_select,
)

# Interval → the start of its bucket, over the hourly rows.
BUCKETS: dict[str, str] = {"hour": "hour", "day": "toStartOfDay(hour, 'UTC')"}
# Breakdown key → its expression over the hourly rows.
BREAKDOWN_KEYS: dict[str, str] = {"contract": "contract", "package": "package", "day": "toDate(hour)"}
SUM_COLUMNS: tuple[str, ...] = tuple(name for name, _ in USAGE_HOURLY_SUMS)
LATENCY_COLUMNS: tuple[str, ...] = tuple(name for name, _ in USAGE_HOURLY_LATENCIES)

_RAW_RANGE = (
    "start_time >= {start_time:DateTime64(9, 'UTC')} AND start_time < {end_time:DateTime64(9, 'UTC')}"
)


@dataclass(frozen=True)
class UsageScope:
    """Which records a dashboard query covers: a tenant (None = every tenant, staff only), optionally
    one contract and one package, over [start, end) in UTC."""

    tenant: str | None
    start: datetime
    end: datetime
    contract: str | None = None
    package: str | None = None
    # True: the caller named a tenant it cannot see; no record counts (common.filters' rule).
    matches_nothing: bool = False


@dataclass(frozen=True)
class RollupDifference:
    """A (tenant, contract, day) whose stored hourly rollup differs from the raw records: each side's
    sums, by column (SUM_COLUMNS)."""

    tenant: str
    contract: str
    day: date
    rollup: dict[str, int]
    raw: dict[str, int]


def scope_conditions(scope: UsageScope, time_column: str, time_type: str) -> tuple[str, dict[str, Any]]:
    """A WHERE condition and its bound parameters (the SQL text holds our own constants only)."""
    parts = [f"{time_column} >= {{start:{time_type}}}", f"{time_column} < {{end:{time_type}}}"]
    if scope.matches_nothing:
        parts.append("0")
    params: dict[str, Any] = {"start": scope.start, "end": scope.end}
    for column, value in (
        ("tenant", scope.tenant),
        ("contract", scope.contract),
        ("package", scope.package),
    ):
        if value is not None:
            parts.append(f"{column} = {{{column}:String}}")
            params[column] = value
    return " AND ".join(parts), params


def _hourly_source(
    scope: UsageScope, *, stored: bool, served_only: bool = False
) -> tuple[str, dict[str, Any]]:
    """FROM clause with hourly rows (stored rollup or computed from raw) and its params.
    `served_only`: the rows of served (`ok`) requests only."""
    served = " AND status = 'ok'" if served_only else ""
    if stored:
        where, params = scope_conditions(scope, "hour", "DateTime('UTC')")
        return f"{USAGE_HOURLY} WHERE {where}{served}", params
    where, params = scope_conditions(scope, "start_time", "DateTime64(9, 'UTC')")
    return f"({usage_hourly_select(query.RECORDS, where + served)})", params


def _experts_source(scope: UsageScope, *, stored: bool) -> tuple[str, dict[str, Any]]:
    if stored:
        where, params = scope_conditions(scope, "day", "Date")
        params.update(start=scope.start.date(), end=scope.end.date())
        return f"{USAGE_EXPERTS_DAILY} WHERE {where}", params
    where, params = scope_conditions(scope, "start_time", "DateTime64(9, 'UTC')")
    return f"({usage_experts_daily_select(query.RECORDS, where)})", params


def _column(name: str, allowed: tuple[str, ...]) -> str:
    """`name` if it is one of the rollup columns `allowed`, else ValueError."""
    if name not in allowed:
        raise ValueError(f"{name!r} is not one of the hourly rollup's columns {allowed}")
    return name


def package_series(
    scope: UsageScope, column: str, interval: str, *, stored: bool
) -> list[tuple[str, datetime, int]]:
    """(package, bucket start, sum of `column`) per package and bucket of `interval` (BUCKETS), in
    that order; buckets without records are absent."""
    total = f"sum({_column(column, SUM_COLUMNS)})"
    source, params = _hourly_source(scope, stored=stored)
    return query.select(
        f"SELECT package, {BUCKETS[interval]} AS bucket, {total} FROM {source} "  # noqa: S608
        "GROUP BY package, bucket ORDER BY package, bucket",
        params,
    )


def expert_tokens(scope: UsageScope, *, stored: bool) -> list[tuple[int, int, int]]:
    """(layer, expert, tokens routed to it) for each activated expert, in that order."""
    source, params = _experts_source(scope, stored=stored)
    return query.select(
        f"SELECT layer, expert, sum(tokens) FROM {source} "  # noqa: S608
        "GROUP BY layer, expert ORDER BY layer, expert",
        params,
    )


def routing_series(
    scope: UsageScope, interval: str, *, stored: bool
) -> list[tuple[datetime, int, int, int, int]]:
    """(bucket start, requests, routing hops, expert-cache hits, misses) per bucket of `interval`."""
    source, params = _hourly_source(scope, stored=stored)
    return query.select(
        f"SELECT {BUCKETS[interval]} AS bucket, sum(requests), sum(hops), "  # noqa: S608
        f"sum(expert_cache_hits), sum(expert_cache_misses) FROM {source} GROUP BY bucket ORDER BY bucket",
        params,
    )


def served_latency_quantiles(
    scope: UsageScope, columns: Sequence[str], *, stored: bool
) -> tuple[int, list[list[float]]]:
    """The number of served (`ok`) requests, and per latency column (LATENCY_COLUMNS, in µs) the
    quantiles LATENCY_QUANTILES of their latencies (merged `quantiles` states)."""
    source, params = _hourly_source(scope, stored=stored, served_only=True)
    merges = ", ".join(f"quantilesMerge({LATENCY_QUANTILES})({_column(c, LATENCY_COLUMNS)})" for c in columns)
    (row,) = query.select(f"SELECT sum(requests), {merges} FROM {source}", params)  # noqa: S608
    served, *states = row
    return served, states


def breakdown_sums(
    scope: UsageScope, by: str, columns: Sequence[str], *, stored: bool
) -> list[tuple[Any, ...]]:
    """(key, sum of each column) per key of `by` (BREAKDOWN_KEYS: a str, or a date for 'day'), ordered
    by key."""
    source, params = _hourly_source(scope, stored=stored)
    sums = ", ".join(f"sum({_column(c, SUM_COLUMNS)})" for c in columns)
    return query.select(
        f"SELECT {BREAKDOWN_KEYS[by]} AS key, {sums} FROM {source} GROUP BY key ORDER BY key",  # noqa: S608
        params,
    )


def _raw_days(start: date, end: date) -> dict[str, datetime]:
    """The parameters of `_RAW_RANGE` for the UTC days [start, end)."""
    return {
        "start_time": datetime.combine(start, time(), UTC),
        "end_time": datetime.combine(end, time(), UTC),
    }


def rollup_differences(start: date, end: date) -> list[RollupDifference]:
    """(tenant, contract, day) keys over [start, end) whose stored hourly rollup differs from the raw
    records (compared on every summed column), with both sides; [] when they agree."""
    columns = SUM_COLUMNS
    sums = ", ".join(f"sum({c}) AS {c}" for c in columns)
    raw_rows = usage_hourly_select(query.RECORDS, _RAW_RANGE)
    stored, raw = (
        f"SELECT tenant, contract, toDate(hour) AS day, {sums} FROM ({source}) "  # noqa: S608
        "WHERE day >= {start:Date} AND day < {end:Date} GROUP BY tenant, contract, day"
        for source in (f"SELECT * FROM {USAGE_HOURLY}", raw_rows)  # noqa: S608
    )
    differs = " OR ".join(f"s.{c} != r.{c}" for c in columns)
    sql = (
        f"SELECT tenant, contract, day, {', '.join(f's.{c}' for c in columns)}, "  # noqa: S608
        f"{', '.join(f'r.{c}' for c in columns)} "
        f"FROM ({stored}) AS s FULL OUTER JOIN ({raw}) AS r USING (tenant, contract, day) "
        f"WHERE {differs} ORDER BY tenant, contract, day"
    )
    params = {"start": start, "end": end, **_raw_days(start, end)}
    width = len(columns)
    return [
        RollupDifference(
            tenant=tenant,
            contract=contract,
            day=day,
            rollup=dict(zip(columns, values[:width], strict=True)),
            raw=dict(zip(columns, values[width:], strict=True)),
        )
        for tenant, contract, day, *values in query.select(sql, params)
    ]


def rebuild_rollups(start: date, end: date) -> None:
    """Replace both rollups' rows for the UTC days [start, end) with a recomputation from the raw
    records (FINAL), e.g. after `rollup_differences` found a copy counted twice.

    Rows ingested for those days while this runs may be counted twice or not at all: run it for days
    whose ingest has settled (past the lateness window), or check again afterwards.
    """
    raw = _raw_days(start, end)
    with locked_client():  # one rebuild at a time in this process, no query of ours in between
        query.command(
            f"DELETE FROM {USAGE_HOURLY} "  # noqa: S608 - constant table name
            "WHERE hour >= {start_time:DateTime('UTC')} AND hour < {end_time:DateTime('UTC')}",
            raw,
        )
        query.command(
            f"INSERT INTO {USAGE_HOURLY} {usage_hourly_select(query.RECORDS, _RAW_RANGE)}{NO_INSERT_DEDUP}",
            raw,
        )
        query.command(
            f"DELETE FROM {USAGE_EXPERTS_DAILY} WHERE day >= {{start:Date}} AND day < {{end:Date}}",  # noqa: S608
            {"start": start, "end": end},
        )
        query.command(
            f"INSERT INTO {USAGE_EXPERTS_DAILY} "
            f"{usage_experts_daily_select(query.RECORDS, _RAW_RANGE)}{NO_INSERT_DEDUP}",
            raw,
        )
