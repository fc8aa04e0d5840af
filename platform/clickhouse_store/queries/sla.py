"""SLA's SQL: the report's measurement (sla.selectors), the burn-rate windows (sla.alerts), route jitter
and expert use (sla.health). Those modules map objectives and exclusions to the plain `Indicator` and
`ExclusionWindow` below, and the rows back to their own objects and rules.

Service level indicators are ClickHouse expressions over one usage record. Status mapping (record
format v1 `status`):
- `rejected` — the platform refused the request as the customer's fault (the 4xx class: malformed,
  oversized, over quota, unauthorised). Not valid: it is in no denominator.
- `ok` — served. Good for availability.
- `error`, `timeout` — failed through the platform. Valid and bad for availability.
Latency objectives count only served (`ok`) requests: a failure is already charged to availability once.
Every value below is a bound parameter; the expressions themselves are our own constants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from .. import query

QUANTILES = ("0.5", "0.9", "0.95", "0.99", "0.999")

# Latency of each layer in microseconds; e2e is the record's own start/end (from the router's receipt, so
# a queued job's e2e includes its wait); queue is a queued job's time from the router's receipt to its
# dispatch (the v2 decision's `queued_us` claim, materialised by migration 0005; 0 for an interactive
# request and for v1 records).
LATENCY_US = {
    "e2e": "intDiv(end_ns - start_ns, 1000)",
    "l1": "l1_latency_us",
    "l2": "l2_latency_us",
    "l3": "l3_latency_us",
    "queue": "queue_latency_us",
}

_EXCLUDED = (
    "arrayExists((c, s, e, f) -> contract = c AND start_ns >= s AND start_ns < e "
    "AND (f = 0 OR status IN ('error', 'timeout')), "
    "{ex_contracts:Array(String)}, {ex_starts:Array(Int64)}, {ex_ends:Array(Int64)}, "
    "{ex_failed_only:Array(UInt8)})"
)
VALID = f"status != 'rejected' AND NOT {_EXCLUDED}"
# Indicators refer to the valid flag by this alias: select `{VALID} AS v` next to them, so the
# exclusion test runs once per row (measured: ~40 % of the report query's time when repeated).
VALID_ALIAS = "v"
EXCLUDED = f"status != 'rejected' AND NOT {VALID_ALIAS}"

_SCOPE = (
    "tenant IN {tenants:Array(String)} AND contract IN {contracts:Array(String)} "
    "AND start_time >= {start:DateTime64(9, 'UTC')} AND start_time < {end:DateTime64(9, 'UTC')}"
)


@dataclass(frozen=True)
class Indicator:
    """An objective as its query counts it.

    Availability (`layer` None): eligible = valid, good = valid and served. Latency of `layer` (a key
    of LATENCY_US): eligible = valid and served, good = also that latency ≤ `threshold_us`. With
    `timeslice_minutes`, the report query also counts it per slice of that many minutes.
    """

    layer: str | None = None
    threshold_us: int = 0
    timeslice_minutes: int | None = None


@dataclass(frozen=True)
class ExclusionWindow:
    """An exclusion of `contract`'s records with start_ns in [start_ns, end_ns): all of them, or with
    `failed_only` the failed (error, timeout) ones. Excluded records are not valid."""

    contract: str
    start_ns: int
    end_ns: int
    failed_only: bool


@dataclass(frozen=True)
class _Expressions:
    """SQL for whether a record is eligible for an indicator and whether it is good; with its params."""

    eligible: str
    good: str
    params: dict[str, Any]


def _expressions(indicator: Indicator, index: int) -> _Expressions:
    """The indicator's eligible/good expressions over a row that has `v` (VALID); `index` names its
    bound threshold uniquely."""
    if indicator.layer is None:
        return _Expressions(eligible=VALID_ALIAS, good=f"{VALID_ALIAS} AND status = 'ok'", params={})
    name = f"threshold_{index}"
    eligible = f"{VALID_ALIAS} AND status = 'ok'"
    return _Expressions(
        eligible=eligible,
        good=f"{eligible} AND {LATENCY_US[indicator.layer]} <= {{{name}:UInt64}}",
        params={name: indicator.threshold_us},
    )


def _exclusion_params(exclusions: Sequence[ExclusionWindow]) -> dict[str, Any]:
    """The bound arrays the VALID/EXCLUDED expressions read (each exclusion applies to its own contract)."""
    return {
        "ex_contracts": [x.contract for x in exclusions],
        "ex_starts": [x.start_ns for x in exclusions],
        "ex_ends": [x.end_ns for x in exclusions],
        "ex_failed_only": [1 if x.failed_only else 0 for x in exclusions],
    }


def _scope(
    tenants: Sequence[str], contracts: Sequence[str], start: datetime, end: datetime
) -> dict[str, Any]:
    return {"tenants": list(tenants), "contracts": list(contracts), "start": start, "end": end}


# --- the report ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """The report query's row: record counts; per layer its exact latency percentiles in µs
    ({quantile: µs}, zeros when nothing was served); per indicator (eligible, good) and, for a
    time-sliced one, {slice start: (eligible, good)}; {local day: [(eligible, good) per indicator]}; the
    newest `ingested_at` (None without records)."""

    records: int
    rejected: int
    excluded: int
    valid: int
    served: int
    percentiles_us: dict[str, dict[str, int]]
    counts: list[tuple[int, int]]
    slices: list[dict[datetime, tuple[int, int]] | None]
    daily: dict[date, list[tuple[int, int]]]
    watermark: datetime | None


def _measurement_sql(indicators: Sequence[Indicator]) -> tuple[str, dict[str, Any]]:
    params: dict[str, Any] = {}
    inner = [
        "start_time",
        "status",
        "ingested_at",
        *(f"{expr} AS lat_{layer}" for layer, expr in LATENCY_US.items()),
        f"{VALID} AS {VALID_ALIAS}",
        f"{EXCLUDED} AS x",
    ]
    outer = [
        "count() AS records",
        "countIf(status = 'rejected') AS rejected",
        "countIf(x) AS excluded",
        "countIf(v) AS valid",
        "countIf(v AND status = 'ok') AS served",
        "if(count() = 0, NULL, max(ingested_at)) AS watermark",
        *(
            f"quantilesExactIf({', '.join(QUANTILES)})(lat_{layer}, v AND status = 'ok') AS q_{layer}"
            for layer in LATENCY_US
        ),
    ]
    day_arrays = []
    for i, indicator in enumerate(indicators):
        ind = _expressions(indicator, i)
        params.update(ind.params)
        inner += [f"toUInt64({ind.eligible}) AS e_{i}", f"toUInt64({ind.good}) AS g_{i}"]
        outer += [f"sum(e_{i}) AS eligible_{i}", f"sum(g_{i}) AS good_{i}"]
        day_arrays += [f"[e_{i}]", f"[g_{i}]"]
        if indicator.timeslice_minutes:
            params[f"slice_{i}"] = indicator.timeslice_minutes
            outer.append(
                f"sumMapIf([toStartOfInterval(start_time, INTERVAL {{slice_{i}:UInt32}} MINUTE)], "
                f"[e_{i}], [g_{i}], e_{i} = 1) AS slices_{i}"
            )
    if day_arrays:
        outer.append(f"sumMap([toDate(start_time, {{tz:String}})], {', '.join(day_arrays)}) AS daily")
    sql = (
        f"SELECT {', '.join(outer)} FROM (SELECT {', '.join(inner)} FROM {query.RECORDS} "  # noqa: S608
        "WHERE tenant = {tenant:String} AND contract = {contract:String} "
        "AND start_time >= {start:DateTime64(9, 'UTC')} AND start_time < {end:DateTime64(9, 'UTC')})"
    )
    return sql, params


def measurement(
    tenant: str,
    contract: str,
    indicators: Sequence[Indicator],
    start: datetime,
    end: datetime,
    exclusions: Sequence[ExclusionWindow],
    time_zone: str,
) -> Measured:
    """Counts, good counts per indicator, exact percentiles per layer, daily and slice counts of the
    contract's records in [start, end), days local to `time_zone`: one query."""
    sql, params = _measurement_sql(indicators)
    params.update(_exclusion_params(exclusions))
    params.update({"tenant": tenant, "contract": contract, "start": start, "end": end})
    if indicators:
        params["tz"] = time_zone
    (row,) = query.select_dicts(sql, params)
    slices: list[dict[datetime, tuple[int, int]] | None] = []
    for i, indicator in enumerate(indicators):
        if indicator.timeslice_minutes:
            keys, eligible, good = row[f"slices_{i}"]
            slices.append({k: (int(e), int(g)) for k, e, g in zip(keys, eligible, good, strict=True)})
        else:
            slices.append(None)
    daily: dict[date, list[tuple[int, int]]] = {}
    if indicators:
        days, *arrays = row["daily"]
        for j, day in enumerate(days):
            daily[day] = [(int(arrays[2 * i][j]), int(arrays[2 * i + 1][j])) for i in range(len(indicators))]
    return Measured(
        records=int(row["records"]),
        rejected=int(row["rejected"]),
        excluded=int(row["excluded"]),
        valid=int(row["valid"]),
        served=int(row["served"]),
        percentiles_us={
            layer: {q: int(v) for q, v in zip(QUANTILES, row[f"q_{layer}"], strict=True)}
            for layer in LATENCY_US
        },
        counts=[(int(row[f"eligible_{i}"]), int(row[f"good_{i}"])) for i in range(len(indicators))],
        slices=slices,
        daily=daily,
        watermark=row["watermark"],
    )


# --- burn-rate windows -----------------------------------------------------------------------------------


def _window_key(window: timedelta) -> str:
    return f"w{int(window.total_seconds())}"


WindowCounts = dict[timedelta, tuple[int, int]]


def window_counts(
    tenants: Sequence[str],
    contracts: Sequence[str],
    indicators: Sequence[Indicator],
    windows: Sequence[timedelta],
    now: datetime,
    exclusions: Sequence[ExclusionWindow],
) -> dict[str, list[WindowCounts]]:
    """{contract code: per indicator {window: (eligible, good)}} for every window ending at `now`
    (`windows` ascending); a contract without records has zeros.

    One query for all the contracts (they share `indicators`: the same policy), grouped by contract.
    """
    oldest = now - windows[-1]
    params = _scope(tenants, contracts, oldest, now)
    params.update(_exclusion_params(exclusions))
    inner, outer = ["contract", "start_time", f"{VALID} AS {VALID_ALIAS}"], ["contract"]
    for window in windows:
        params[_window_key(window)] = now - window
    for i, indicator in enumerate(indicators):
        ind = _expressions(indicator, i)
        params.update(ind.params)
        inner += [f"toUInt64({ind.eligible}) AS e_{i}", f"toUInt64({ind.good}) AS g_{i}"]
        for window in windows:
            since = f"start_time >= {{{_window_key(window)}:DateTime64(9, 'UTC')}}"
            outer += [f"sumIf(e_{i}, {since})", f"sumIf(g_{i}, {since})"]
    sql = (
        f"SELECT {', '.join(outer)} FROM (SELECT {', '.join(inner)} FROM {query.RECORDS} "  # noqa: S608
        f"WHERE {_SCOPE}) GROUP BY contract"
    )
    rows = {row[0]: row[1:] for row in query.select(sql, params)}
    zero = (0,) * (2 * len(windows) * len(indicators))
    result = {}
    for contract in contracts:
        row = rows.get(contract, zero)
        result[contract] = [
            {w: (int(row[base + 2 * k]), int(row[base + 2 * k + 1])) for k, w in enumerate(windows)}
            for base in range(0, len(row), 2 * len(windows))
        ]
    return result


# --- route jitter and expert use -------------------------------------------------------------------------

_JITTER_SQL = (
    "SELECT contract, count(), stddevPop(p95) FROM (SELECT contract, "  # noqa: S608
    "quantileExact(0.95)(end_ns - start_ns) / 1e6 AS p95 "
    f"FROM {query.RECORDS} WHERE {_SCOPE} AND status = 'ok' "
    "GROUP BY contract, toStartOfInterval(start_time, INTERVAL {bucket:UInt32} MINUTE)) GROUP BY contract"
)
_EXPERTS_SQL = (
    "SELECT contract, e.layer, e.expert, "  # noqa: S608
    "sumIf(e.tokens, start_time < {recent:DateTime64(9, 'UTC')}) AS before, "
    "sumIf(e.tokens, start_time >= {recent:DateTime64(9, 'UTC')}) AS recent "
    f"FROM {query.RECORDS} ARRAY JOIN experts AS e WHERE {_SCOPE} AND status = 'ok' "
    "GROUP BY contract, e.layer, e.expert ORDER BY contract, e.layer, e.expert"
)


def p95_spread(
    tenants: Sequence[str], contracts: Sequence[str], start: datetime, end: datetime, bucket_minutes: int
) -> list[tuple[str, int, float]]:
    """(contract, buckets with served requests, population stddev of the buckets' P95 end-to-end latency
    in ms) over [start, end) cut into buckets of `bucket_minutes`; contracts without served requests
    are left out."""
    params = {**_scope(tenants, contracts, start, end), "bucket": bucket_minutes}
    return [(code, int(buckets), spread) for code, buckets, spread in query.select(_JITTER_SQL, params)]


def expert_tokens(
    tenants: Sequence[str], contracts: Sequence[str], start: datetime, recent: datetime, end: datetime
) -> list[tuple[str, int, int, int, int]]:
    """(contract, layer, expert, tokens routed to it in [start, recent), in [recent, end)) of served
    requests, ordered by contract, layer and expert."""
    params = {**_scope(tenants, contracts, start, end), "recent": recent}
    return [
        (code, int(layer), int(expert), int(before), int(after))
        for code, layer, expert, before, after in query.select(_EXPERTS_SQL, params)
    ]
