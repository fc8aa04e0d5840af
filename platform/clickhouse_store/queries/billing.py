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
from datetime import UTC, date, datetime
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
    Dimension.CACHE_WRITE_TOKENS: "sum(prefix_cache_write_tokens)",
    Dimension.EXPERT_TOKENS: "sum(expert_tokens)",
    Dimension.ROUTING_HOPS: "sum(hops.size0)",
    Dimension.L2_MISSES: "sum(expert_cache_misses)",
    Dimension.L3_SECONDS: "sum(l3_latency_us)",
    Dimension.DISTINCT_EXPERTS: "sum(distinct_experts)",
}
if tuple(AGGREGATE_SQL) != AGGREGATED_DIMENSIONS:
    raise RuntimeError("AGGREGATE_SQL must map exactly pricing.dimensions.AGGREGATED_DIMENSIONS, in order")

_OK = "status = 'ok' AND NOT superseded AND NOT disputed AND NOT paused"
# The records' own tenant and contract columns. The rating query names its output columns `tenant` and
# `contract` (derived from its group key, `usage_sql`), which shadow the columns' plain names there.
_TENANT, _CONTRACT = f"{query.USAGE_RECORDS}.tenant", f"{query.USAGE_RECORDS}.contract"
# A custom metric's per-record value (Float64) as an exact decimal of 18 places, so the period's sum is
# exact and does not depend on the order the engine adds in: a Float64 sum's last bits vary between
# identical runs, and 1e16 + 1 - 1e16 is 0 or 1 by order. Values beyond ±1e58 fail the query.
METRIC_VALUE = "toDecimal256({}, 18)"

# Bound-parameter SQL over one record: whether a dispute excluded it, whether an SLA pause covers it.
DISPUTED = "has({ex_ids:Array(UUID)}, record_id)"
PAUSED = (
    f"arrayExists((c, s, e, f) -> {_CONTRACT} = c AND start_ns >= s AND start_ns < e "
    "AND (f = 0 OR status IN ('error', 'timeout')), "
    "{pz_contracts:Array(String)}, {pz_starts:Array(Int64)}, {pz_ends:Array(Int64)}, "
    "{pz_failed_only:Array(UInt8)})"
)
# Whether a retry of the same request superseded it (the retry's contract is the record's own).
SUPERSEDED = (
    f"arrayExists((c, r) -> {_CONTRACT} = c AND record_id = r, "
    "{sp_contracts:Array(String)}, {sp_ids:Array(UUID)})"
)
# Which price segment a record falls in: how many of its contract's change instants are at or before it.
SEGMENT = (
    f"arrayCount((c, b) -> {_CONTRACT} = c AND start_ns >= b, "
    "{sg_contracts:Array(String)}, {sg_bounds:Array(Int64)})"
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
    """What the rating query leaves out: these record ids (disputes), the records in these windows, and
    these (contract, record id) attempts a retry superseded."""

    record_ids: tuple[str, ...] = ()
    pauses: tuple[PauseWindow, ...] = ()
    superseded: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class UsageRow:
    """One (tenant, contract, segment) group of the rating query: all its records, those a dispute or
    a pause left out, those a retry superseded, each dimension's integer aggregate and each custom
    metric's exact aggregate (by its expression text) over the billable ones (ok, not excluded). A
    metric whose aggregation is not additive (`Metric.additive`) also has its whole period's value in
    `period_metrics`: the same in every segment of the contract with billable records (empty in the
    others)."""

    tenant: str
    contract: str
    segment: int
    records: int
    by_dispute: int
    by_pause: int
    by_retry: int
    aggregates: dict[str, int]
    metrics: dict[str, Decimal]
    period_metrics: dict[str, Decimal]


# The billable groups of one contract (its segments), over which a metric's whole-period value is taken.
_CONTRACT_WINDOW = "PARTITION BY pair, state"


def _metric_columns(aggregation: str, value_sql: str, in_metric: str) -> tuple[str, str | None]:
    """A custom metric's aggregate over a group's billable records (`in_metric` holds for them), and, if
    its aggregation is not additive, its value over all the contract's segments (a window over the
    groups). The per-record value is `if(in_metric, value, 0)`: `if` evaluates the value (a Float64
    expression, `value_sql`) for those rows only."""
    value = f"if({in_metric}, {METRIC_VALUE.format(value_sql)}, {METRIC_VALUE.format('0')})"
    latest_key = "(start_ns, toString(record_id))"  # ties: the greater record id, as text
    match aggregation:
        case "sum":
            return f"sumIf({value}, {in_metric})", None
        case "period_max":
            group = f"maxIf({value}, {in_metric})"
            return group, f"max({group}) OVER ({_CONTRACT_WINDOW})"
        case "unique_count":
            group = f"toDecimal256(uniqExactIf({value}, {in_metric}), 18)"
            period = f"uniqExactIfMerge(uniqExactIfState({value}, {in_metric})) OVER ({_CONTRACT_WINDOW})"
            return group, f"toDecimal256({period}, 18)"
        case "latest":
            group = f"argMaxIf({value}, {latest_key}, {in_metric})"
            return group, f"argMax({group}, maxIf({latest_key}, {in_metric})) OVER ({_CONTRACT_WINDOW})"
        case "time_weighted_sum":
            # Each value held until the next record's start: the next in the group, or the first of a
            # later segment (a window over the groups in segment order), or the period's end.
            held = f"arraySort(groupArrayIf((start_ns, toString(record_id), {value}), {in_metric}))"
            later = (
                f"min(minIfOrNull(start_ns, {in_metric})) OVER ({_CONTRACT_WINDOW} ORDER BY segment "
                "ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING)"
            )
            starts = f"arrayMap(x -> x.1, {held})"
            following = f"arrayPushBack(arrayPopFront({starts}), coalesce({later}, {{tw_end_ns:Int64}}))"
            until = f"arraySlice({following}, 1, length({held}))"  # a group without the metric: none
            weighted = f"arraySum(arrayMap((x, n) -> x.3 * (n - x.1), {held}, {until}))"
            return f"{weighted} / {{tw_period_ns:Int64}}", None
    raise ValueError(f"unknown aggregation {aggregation!r}")


def _exclusions(excluded: Excluded, params: dict[str, Any]) -> str:
    """The WITH clause naming, per record, whether a retry superseded it, a dispute excluded it or a
    pause covers it; the parameters go into `params`. What the period does not have is a constant, not
    a per-row lambda over empty arrays (a fifth of the rating query's time over a month of records)."""
    superseded, disputed, paused = "0", "0", "0"
    if excluded.superseded:
        superseded = SUPERSEDED
        params["sp_contracts"] = [contract for contract, _ in excluded.superseded]
        params["sp_ids"] = [record_id for _, record_id in excluded.superseded]
    if excluded.record_ids:
        disputed = DISPUTED
        params["ex_ids"] = sorted(excluded.record_ids)
    if excluded.pauses:
        paused = PAUSED
        params["pz_contracts"] = [x.contract for x in excluded.pauses]
        params["pz_starts"] = [unix_nanos(x.starts_at) for x in excluded.pauses]
        params["pz_ends"] = [unix_nanos(x.ends_at) for x in excluded.pauses]
        params["pz_failed_only"] = [1 if x.failed_only else 0 for x in excluded.pauses]
    return f"WITH {superseded} AS superseded, {disputed} AS disputed, {paused} AS paused"


class RatingQuery(NamedTuple):
    """The rating query, its parameters, and where each distinct custom metric expression is among the
    metric columns (contracts sharing an expression share one): its group's value, and, for an
    aggregation that is not additive, its whole period's value."""

    sql: str
    params: dict[str, Any]
    metric_column: dict[str, int]
    period_column: dict[str, int]


def usage_sql(
    contracts: Sequence[RatedContract],
    start: datetime,
    end: datetime,
    excluded: Excluded = Excluded(),
    *,
    sandbox: bool = False,
    packages: Sequence[str] = (),
) -> RatingQuery:
    """The one GROUP BY query for these contracts over [start, end) (`RatingQuery`).
    Built from our own constant expressions and rendered metrics only; tenants, contracts, period,
    numbers and the excluded record ids and paused windows are bound parameters.

    It groups by tenant, contract, segment and the records' state (billable, not ok, disputed,
    paused), all four given by one integer, `usage_group`: the contract's and the tenant's positions
    in the parameter lists, the segment and the state. Tenant, contract and segment are functions of
    it, which the engine drops from the keys (`optimize_group_by_function_keys`), so it hashes one
    number instead of two strings, and sums plain columns instead of filtered ones (this query over
    10M records: about 1.5 × a bare GROUP BY contract, against 3 × grouped by the two strings with
    FILTER). `usage_rows` adds a group's states up."""
    in_period, period = query.in_period(start, end)
    tenants = sorted({c.tenant for c in contracts})
    spans = {
        "tenant_span": len(tenants) + 1,
        "segment_span": max((len(c.bounds) for c in contracts), default=0) + 1,
    }
    params: dict[str, Any] = {
        "tenants": tenants,
        "contracts": [c.contract for c in contracts],
        "contract_keys": list(range(1, len(contracts) + 1)),
        "tenant_keys": list(range(1, len(tenants) + 1)),
        **spans,
        **period,
    }
    segment = "0"
    state = "toUInt64(status != 'ok')"
    if excluded.record_ids or excluded.pauses or excluded.superseded:
        state = (
            f"multiIf(superseded, {SUPERSEDED_STATE}, disputed, {DISPUTED_STATE}, paused, {PAUSED_STATE}, "
            "status = 'ok', 0, 1)"
        )
    exclusions = _exclusions(excluded, params)
    if any(c.bounds for c in contracts):
        segment = SEGMENT
        params["sg_contracts"] = [c.contract for c in contracts for _ in c.bounds]
        params["sg_bounds"] = [unix_nanos(b) for c in contracts for b in c.bounds]
    columns = list(AGGREGATE_SQL.values())
    users: dict[str, tuple[Metric, list[str]]] = {}
    for rated in contracts:
        for metric in rated.metrics:
            users.setdefault(metric.expression, (metric, []))[1].append(rated.contract)
    metric_column: dict[str, int] = {}
    period_column: dict[str, int] = {}
    period_columns: list[str] = []
    for k, (expression, (metric, codes)) in enumerate(users.items()):
        rendered = metric_sql(metric, param_prefix=f"m{k}p")
        params.update(rendered.params)
        params[f"m{k}c"] = sorted(set(codes))
        # Only the billable records of the contracts that have the metric are aggregated.
        in_metric = f"{_OK} AND {_CONTRACT} IN {{m{k}c:Array(String)}}"
        group, whole = _metric_columns(metric.aggregation, rendered.sql, in_metric)
        columns.append(group)
        metric_column[expression] = k
        if whole is not None:
            period_column[expression] = len(users) + len(period_columns)
            period_columns.append(whole)
        if metric.aggregation == "time_weighted_sum":
            params["tw_end_ns"], params["tw_period_ns"] = unix_nanos(end), unix_nanos(end) - unix_nanos(start)
    columns += period_columns
    pair = (
        f"toUInt64(transform({_CONTRACT}, {{contracts:Array(String)}}, {{contract_keys:Array(UInt32)}}, 0)) "
        f"* {{tenant_span:UInt64}} + transform({_TENANT}, {{tenants:Array(String)}}, "
        "{tenant_keys:Array(UInt32)}, 0)"
    )
    group = f"(({pair}) * {{segment_span:UInt64}} + {segment}) * {STATES} + {state} AS usage_group"
    derived = (
        f"intDiv(usage_group, {STATES}) % {{segment_span:UInt64}} AS segment, "
        f"intDiv(usage_group, {STATES} * {{segment_span:UInt64}}) AS pair, "
        f"usage_group % {STATES} AS state, "
        "{contracts:Array(String)}[intDiv(pair, {tenant_span:UInt64})] AS contract, "
        "{tenants:Array(String)}[pair % {tenant_span:UInt64}] AS tenant"
    )
    sql = (
        f"{exclusions} SELECT {group}, {derived}, "  # noqa: S608
        + ", ".join(columns)
        + f" FROM {query.records(sandbox)} WHERE {in_period} "
        + (_NAMED if len(contracts) < PRUNE_BELOW else "")
        + ("AND package IN {only_packages:Array(String)} " if packages else "")
        + "GROUP BY tenant, contract, segment, usage_group"
    )
    if packages:
        params["only_packages"] = list(packages)
    return RatingQuery(sql, params, metric_column, period_column)


# Below this many contracts the query names their tenants and contracts in WHERE, so the primary key
# (tenant, contract, …) skips the other records. An invoice run's contracts have about all of the
# period's records, and there the condition only costs (a third of the query over 10M records).
# Records of contracts or tenants not asked for fall in groups at position 0, which usage_rows drops.
PRUNE_BELOW = 64
_NAMED = f"AND {_TENANT} IN {{tenants:Array(String)}} AND {_CONTRACT} IN {{contracts:Array(String)}} "

# A group's record state (the key's last digit, base STATES): billable (ok, not excluded), not ok,
# left out by a dispute, left out by a pause (and no dispute), superseded by a retry (whatever else).
STATES, BILLABLE, DISPUTED_STATE, PAUSED_STATE, SUPERSEDED_STATE = 5, 0, 2, 3, 4
if AGGREGATE_SQL[AGGREGATED_DIMENSIONS[0]] != "count()":
    raise RuntimeError("usage_rows counts a group's records with its first aggregate, count()")
_FIRST_AGGREGATE = 6  # after usage_group, segment, pair, state, contract, tenant


def usage_rows(
    contracts: Sequence[RatedContract],
    start: datetime,
    end: datetime,
    excluded: Excluded,
    *,
    sandbox: bool = False,
    packages: Sequence[str] = (),
) -> list[UsageRow]:
    """The rating query's groups (`usage_sql`), one per (tenant, contract, segment) with records. A
    group's tenant may differ from its contract's: the caller keeps only the contract's own. `sandbox`:
    of the customer sandboxes' records; `packages`: only the records made under these."""
    sql, params, metric_column, period_column = usage_sql(
        contracts, start, end, excluded, sandbox=sandbox, packages=packages
    )
    first_metric = _FIRST_AGGREGATE + len(AGGREGATED_DIMENSIONS)
    counts: dict[tuple[str, str, int], list[int]] = {}
    billable: dict[tuple[str, str, int], tuple[Any, ...]] = {}
    for row in query.select(sql, params):
        _, segment, _pair, state, contract, tenant = row[:_FIRST_AGGREGATE]
        if not contract or not tenant:  # at position 0: a record of a contract or tenant not asked for
            continue
        key = (tenant, contract, int(segment))
        found = counts.setdefault(key, [0, 0, 0, 0])
        records = int(row[_FIRST_AGGREGATE])
        found[0] += records
        if state == DISPUTED_STATE:
            found[1] += records
        elif state == PAUSED_STATE:
            found[2] += records
        elif state == SUPERSEDED_STATE:
            found[3] += records
        elif state == BILLABLE:
            billable[key] = row
    rows = []
    for key, (records, by_dispute, by_pause, by_retry) in counts.items():
        sums = billable.get(key)
        rows.append(
            UsageRow(
                *key,
                records,
                by_dispute,
                by_pause,
                by_retry,
                {
                    d: int(sums[_FIRST_AGGREGATE + k] or 0) if sums else 0
                    for k, d in enumerate(AGGREGATED_DIMENSIONS)
                },
                {
                    e: Decimal(sums[first_metric + k] or 0) if sums else Decimal(0)
                    for e, k in metric_column.items()
                },
                {e: Decimal(sums[first_metric + k] or 0) for e, k in period_column.items()} if sums else {},
            )
        )
    return rows


class CatalogueDay(NamedTuple):
    """One model's billable tokens on one UTC day (the LLM price catalogue's rating unit)."""

    model_id: str
    day: date
    tokens_in: int
    tokens_out: int
    cache_read: int
    cache_write: int


def catalogue_days(
    contracts: Sequence[tuple[str, str]],
    start: datetime,
    end: datetime,
    excluded: Excluded = Excluded(),
    *,
    sandbox: bool = False,
) -> dict[tuple[str, str], list[CatalogueDay]]:
    """Per (tenant, contract) of `contracts`: its billable tokens of [start, end) (ok, not excluded: the
    rating query's rule) per model and UTC day of the records' start, by model and day; one query for
    all of them. Records under another tenant's code are not counted."""
    in_period, params = query.in_period(start, end)
    params.update(
        {"tenants": sorted({t for t, _ in contracts}), "contracts": sorted({c for _, c in contracts})}
    )
    exclusions = _exclusions(excluded, params)
    rows = query.select(
        f"{exclusions} SELECT {_TENANT}, {_CONTRACT}, model_id, toDate(start_time) AS day, "  # noqa: S608
        "sum(tokens_in), sum(tokens_out), sum(prefix_cache_hit_tokens), sum(prefix_cache_write_tokens) "
        f"FROM {query.records(sandbox)} WHERE {in_period} AND {_TENANT} IN {{tenants:Array(String)}} "
        f"AND {_CONTRACT} IN {{contracts:Array(String)}} AND {_OK} "
        f"GROUP BY {_TENANT}, {_CONTRACT}, model_id, day ORDER BY {_TENANT}, {_CONTRACT}, model_id, day",
        params,
    )
    wanted = set(contracts)
    found: dict[tuple[str, str], list[CatalogueDay]] = {key: [] for key in wanted}
    for tenant, contract, model, day, tokens_in, tokens_out, read, write in rows:
        if (tenant, contract) in wanted:
            found[(tenant, contract)].append(
                CatalogueDay(model, day, int(tokens_in), int(tokens_out), int(read), int(write))
            )
    return found


class SupersededAttempt(NamedTuple):
    """A record id a retry's signed decision superseded, the retry's tenant and contract, and when the
    retry was ingested (the superseded record is rated out from then on)."""

    tenant: str
    contract: str
    record_id: str
    ingested_at: datetime


def superseded_attempts(
    contracts: Sequence[str], start: datetime, end: datetime, *, sandbox: bool = False
) -> list[SupersededAttempt]:
    """The attempts that retries of these contracts' requests in [start, end) superseded (a retry has
    its request's start, so both fall in one period); the earliest retry naming each, by record id."""
    in_period, params = query.in_period(start, end)
    rows = query.select(
        "SELECT tenant, contract, toString(superseded) AS attempt, min(ingested_at) AS at "  # noqa: S608
        f"FROM {query.records(sandbox)} ARRAY JOIN supersedes AS superseded "
        f"WHERE {in_period} AND contract IN {{contracts:Array(String)}} AND notEmpty(supersedes) "
        "GROUP BY tenant, contract, attempt ORDER BY attempt",
        {**params, "contracts": list(contracts)},
    )
    return [SupersededAttempt(t, c, r, at if at.tzinfo else at.replace(tzinfo=UTC)) for t, c, r, at in rows]


class LayerTimes(NamedTuple):
    """Successful requests of one (agent, tenant, contract, package) and their layer times (µs)."""

    agent_id: str
    tenant: str
    contract: str
    package: str
    requests: int
    l3_us: int
    l1_l2_us: int
    l1_us: int


def _cost_sql(sandbox: bool) -> str:
    return (
        "SELECT agent_id, tenant, contract, package, count(), sum(l3_latency_us), "  # noqa: S608
        f"sum(l1_latency_us + l2_latency_us), sum(l1_latency_us) FROM {query.records(sandbox)} "
        "WHERE status = 'ok' AND start_time >= {start:DateTime64(9, 'UTC')} "
        "AND start_time < {end:DateTime64(9, 'UTC')} "
        "AND ({package:String} = '' OR package = {package:String}) "
        "GROUP BY agent_id, tenant, contract, package"
    )


def layer_times(
    start: datetime, end: datetime, package: str = "", *, sandbox: bool = False
) -> list[LayerTimes]:
    """The layer times of [start, end)'s successful records per (agent, tenant, contract, package), of
    one package ("": all; `sandbox`: of the customer sandboxes' records); one query, the costs are
    applied per agent by the caller."""
    rows = query.select(_cost_sql(sandbox), {"start": start, "end": end, "package": package})
    return [
        LayerTimes(a, t, c, p, int(n), int(l3), int(l1_l2), int(l1)) for a, t, c, p, n, l3, l1_l2, l1 in rows
    ]


class ExpertShare(NamedTuple):
    """One agent's successful records of [start, end) that used an expert (model, layer, expert): how
    many, and the µs of their L3 and L2 time that are the expert's (`billing.cost_split`'s rule: L3 by
    the expert's token share in its layer, each layer of a record weighing the same; L2 in equal shares
    among the record's experts), exact."""

    agent_id: str
    model_id: str
    layer: int
    expert: int
    requests: int
    l3_us: Decimal
    l2_us: Decimal


# Per record and expert: its layer's tokens and the record's layers, from the record's own array.
_EXPERT_SHARES_SQL = (
    "SELECT agent_id, model_id, e.layer, e.expert, count(), "  # noqa: S608
    "sum(toDecimal256(l3_latency_us, 18) * e.tokens "
    "/ (arraySum(x -> if(x.layer = e.layer, toUInt64(x.tokens), 0), experts) "
    "* length(arrayDistinct(arrayMap(x -> x.layer, experts))))), "
    "sum(toDecimal256(l2_latency_us, 18) / length(experts)) "
    f"FROM {query.RECORDS} ARRAY JOIN experts AS e "
    "WHERE status = 'ok' AND start_time >= {start:DateTime64(9, 'UTC')} "
    "AND start_time < {end:DateTime64(9, 'UTC')} "
    "GROUP BY agent_id, model_id, e.layer, e.expert ORDER BY agent_id, model_id, e.layer, e.expert"
)


def expert_shares(start: datetime, end: datetime) -> list[ExpertShare]:
    """Each agent's expert shares of [start, end)'s successful records' L3 and L2 time; one query."""
    rows = query.select(_EXPERT_SHARES_SQL, {"start": start, "end": end})
    return [
        ExpertShare(a, m, int(layer), int(expert), int(n), Decimal(l3), Decimal(l2))
        for a, m, layer, expert, n, l3, l2 in rows
    ]


# A loan of executors to a subtree (the scheduler's borrow and return): the L3 time the lent executors
# spent on successful records while held, and the borrower's successful requests per contract then.
_LOAN_BUSY_SQL = (
    f"SELECT agent_id, sum(l3_latency_us) FROM {query.RECORDS} "  # noqa: S608
    "WHERE status = 'ok' AND agent_id IN {agents:Array(String)} "
    "AND start_time >= {start:DateTime64(9, 'UTC')} AND start_time < {end:DateTime64(9, 'UTC')} "
    "GROUP BY agent_id"
)
_LOAN_SHARES_SQL = (
    f"SELECT tenant, contract, package, count() FROM {query.RECORDS} "  # noqa: S608
    "WHERE status = 'ok' AND JSONExtractString(decision, 'claims', 'subtree') = {subtree:String} "
    "AND start_time >= {start:DateTime64(9, 'UTC')} AND start_time < {end:DateTime64(9, 'UTC')} "
    "GROUP BY tenant, contract, package ORDER BY tenant, contract, package"
)


class SubtreeShare(NamedTuple):
    """One contract's successful requests decided for a subtree in a window."""

    tenant: str
    contract: str
    package: str
    requests: int


def busy_l3_us(agents: Sequence[str], start: datetime, end: datetime) -> dict[str, int]:
    """Per agent of ``agents``: the L3 µs of its successful records that started in [start, end)."""
    rows = query.select(_LOAN_BUSY_SQL, {"agents": list(agents), "start": start, "end": end})
    return {agent: int(us) for agent, us in rows}


def subtree_shares(subtree: str, start: datetime, end: datetime) -> list[SubtreeShare]:
    """The successful requests of [start, end) whose signed decision names ``subtree``, per contract."""
    rows = query.select(_LOAN_SHARES_SQL, {"subtree": subtree, "start": start, "end": end})
    return [SubtreeShare(t, c, p, int(n)) for t, c, p, n in rows]


def _rule_source(sandbox: bool = False) -> str:
    """The record fields a rule sees, plus the period's latency percentiles and error rate per contract.
    Our own constant SQL; tenant, contract and period are bound parameters."""
    return (
        "SELECT *, start_time, l1_latency_us, l2_latency_us, l3_latency_us, "  # noqa: S608
        "(toFloat64(end_ns - start_ns) / 1000000.) AS latency_ms_, "
        "quantileExact(0.5)(latency_ms_) OVER () AS p50_latency_ms, "
        "quantileExact(0.99)(latency_ms_) OVER () AS p99_latency_ms, "
        "avg(toFloat64(status != 'ok')) OVER () AS error_rate "
        f"FROM {query.records(sandbox)} "
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
        f"FROM ({_rule_source()}) WHERE outcome != '' AND status = 'ok' ORDER BY start_time, record_id"
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


class EventRecord(NamedTuple):
    """A record of a business event: the customer's event id (the record's `client_request_id`), the
    package it was made under, its model and status, whether its model's acceptance rule holds, and
    when it started (UTC)."""

    event_id: str
    record_id: str
    package: str
    model_id: str
    status: str
    accepted: bool
    start_time: datetime


def event_records(
    tenant: str,
    contract: str,
    start: datetime,
    end: datetime,
    rules: dict[str, Metric],
    *,
    sandbox: bool = False,
) -> list[EventRecord]:
    """The contract's records of [start, end) that carry an event id, by event and start time, each with
    whether the acceptance rule of its model (`rules`, by model id; a model without one: accepted) holds
    for it; one query."""
    branches: list[str] = []
    params: dict[str, Any] = {}
    for number, (model_id, rule) in enumerate(sorted(rules.items())):
        rendered = metric_sql(rule, f"a{number}_")
        params |= rendered.params | {f"m{number}": model_id}
        branches += [f"model_id = {{m{number}:String}}", f"(({rendered.sql}) != 0)"]
    accepted = f"multiIf({', '.join(branches)}, 1)" if branches else "1"
    sql = (
        "SELECT client_request_id, toString(record_id), package, model_id, status, "  # noqa: S608
        f"toUInt8({accepted}), start_time FROM ({_rule_source(sandbox)}) WHERE client_request_id != '' "
        "ORDER BY client_request_id, start_time, record_id"
    )
    rows = query.select(sql, {**params, "tenant": tenant, "contract": contract, "start": start, "end": end})
    return [EventRecord(e, r, p, m, s, bool(a), t.replace(tzinfo=UTC)) for e, r, p, m, s, a, t in rows]
