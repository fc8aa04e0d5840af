"""Reads for the usage dashboard: time series, expert heatmap, routing, latency, breakdowns, and the
serving tree's subtrees that served the caller.

Every query reads an hourly rollup (`usage_hourly`, `usage_experts_daily`; clickhouse_store.schema)
when the period's bounds fall on its grain, and otherwise computes the same rollup on the fly from the
deduplicated raw records restricted to the exact period. Both paths then run the same outer query
(clickhouse_store.queries.usage), so they answer alike; tests/usage prove the stored rollups equal the
raw records.

Duplicates: ingest keeps copies out of usage_records (per-agent sequence ranges; a retried insert is
dropped by its insert_deduplication_token, and the rollup tables keep the same deduplication window,
so the views drop the retried block too). A copy that still gets in (re-sent under a new token after
a lost PostgreSQL commit) is collapsed by FINAL on the raw table, but a rollup counts it:
`rollup_differences` finds such days and `usage.services.rebuild_rollups` recomputes them
(`manage.py usage_rollups`).

Latency percentiles are ClickHouse `quantiles` (reservoir of 8192 values per state): exact with fewer
served requests per query than that, an estimate above. Only served (`ok`) requests count, as in SLA.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.db.models import QuerySet

from accounts.access import Principal
from clickhouse_store.queries import usage as usage_sql
from clickhouse_store.queries.scheduling import subtree_timeline
from clickhouse_store.queries.usage import UsageScope
from contracts.models import Contract
from scheduling.selectors import route_events, timeline_bucket_s
from sla.models import Objective
from sla.terms import policies_for
from treemeter_records.timeutil import assume_utc

# Dashboard dimension → (rollup column, divisor, decimal places of the answer).
DIMENSIONS: dict[str, tuple[str, Decimal, int]] = {
    "requests": ("requests", Decimal(1), 0),
    "tokens_in": ("tokens_in", Decimal(1), 0),
    "tokens_out": ("tokens_out", Decimal(1), 0),
    "cached_tokens": ("cached_tokens", Decimal(1), 0),
    "expert_tokens": ("expert_tokens", Decimal(1), 0),
    "l3_seconds": ("l3_us", Decimal(1_000_000), 6),
}
# Breakdowns total these: the dashboard dimensions plus the routing counters.
BREAKDOWN_DIMENSIONS: dict[str, tuple[str, Decimal, int]] = {
    **DIMENSIONS,
    "routing_hops": ("hops", Decimal(1), 0),
    "expert_cache_hits": ("expert_cache_hits", Decimal(1), 0),
    "expert_cache_misses": ("expert_cache_misses", Decimal(1), 0),
}
INTERVALS: dict[str, timedelta] = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
assert INTERVALS.keys() == usage_sql.BUCKETS.keys()  # each interval has its bucket in ClickHouse
BREAKDOWN_KEYS: tuple[str, ...] = tuple(usage_sql.BREAKDOWN_KEYS)  # contract, package, day
LATENCY_LAYERS: dict[str, str] = {"L1": "lat_l1", "L2": "lat_l2", "L3": "lat_l3", "total": "lat_total"}
SLA_LAYERS = {"e2e": "total", "l1": "L1", "l2": "L2", "l3": "L3", "queue": "queue"}
PERCENTILES = ("p50_ms", "p95_ms", "p99_ms")  # the order of schema.LATENCY_QUANTILES
AVG_HOPS_PLACES = Decimal("0.001")
RATE_PLACES = Decimal("0.0001")
MS_PLACES = Decimal("0.001")
SUBTREE_EVENTS_MAX = 2000  # the newest scheduler events a subtree answer carries; the answer says so


@dataclass(frozen=True)
class UsageFilter(UsageScope):
    """Which records a dashboard query covers (`UsageScope`: a tenant, optionally one contract and one
    package, over [start, end) in UTC), and whether the stored rollups may answer it."""

    # False: always compute from the raw records (to compare or time both paths).
    rollups: bool = True

    def on_grain(self, grain: timedelta) -> bool:
        """Whether the stored rollups may answer: both bounds fall on their grain (hour or day)."""
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        bounds = (self.start, self.end)
        return self.rollups and all((instant - epoch) % grain == timedelta(0) for instant in bounds)


def _fixed(value: Decimal, places: int) -> str:
    return f"{value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP):f}"


def _quantity(raw: int, divisor: Decimal, places: int) -> str:
    return _fixed(Decimal(int(raw)) / divisor, places)


def _ratio(numerator: int, denominator: int, places: Decimal) -> str | None:
    if not denominator:
        return None
    return f"{(Decimal(int(numerator)) / Decimal(int(denominator))).quantize(places, ROUND_HALF_UP):f}"


def _buckets(usage: UsageFilter, interval: str) -> list[datetime]:
    """Every bucket start from the one holding `start` up to `end` (the time series is zero-filled)."""
    step = INTERVALS[interval]
    first = usage.start.replace(minute=0, second=0, microsecond=0)
    if interval == "day":
        first = first.replace(hour=0)
    buckets = []
    while first < usage.end:
        buckets.append(first)
        first += step
    return buckets


@dataclass(frozen=True)
class Answer:
    """A dashboard answer and whether it came from the stored rollups."""

    body: dict[str, Any]
    from_rollup: bool


def timeseries(usage: UsageFilter, dimension: str, interval: str) -> Answer:
    """Per package, the dimension's total per hour or day, zero-filled, as decimal strings."""
    column, divisor, places = DIMENSIONS[dimension]
    rollup = usage.on_grain(INTERVALS["hour"])
    rows = usage_sql.package_series(usage, column, interval, stored=rollup)
    totals: dict[str, dict[datetime, int]] = defaultdict(dict)
    for package, bucket, value in rows:
        totals[package][assume_utc(bucket)] = value
    buckets = _buckets(usage, interval)
    series = [
        {
            "package": package,
            "points": [
                [bucket.isoformat(), _quantity(values.get(bucket, 0), divisor, places)] for bucket in buckets
            ],
        }
        for package, values in totals.items()
    ]
    return Answer({"dimension": dimension, "interval": interval, "series": series}, rollup)


def experts(usage: UsageFilter) -> Answer:
    """Tokens routed to each (layer, expert): the activation heatmap."""
    rollup = usage.on_grain(INTERVALS["day"])
    rows = usage_sql.expert_tokens(usage, stored=rollup)
    cells = [[int(layer), int(expert), int(tokens)] for layer, expert, tokens in rows]
    return Answer(
        {
            "layers": max((c[0] for c in cells), default=-1) + 1,
            "experts": max((c[1] for c in cells), default=-1) + 1,
            "cells": cells,
        },
        rollup,
    )


def routing(usage: UsageFilter, interval: str) -> Answer:
    """Average routing hops per request and expert-cache hit rate, per bucket and in total."""
    rollup = usage.on_grain(INTERVALS["hour"])
    rows = usage_sql.routing_series(usage, interval, stored=rollup)
    points = []
    total = [0, 0, 0, 0]
    for bucket, requests, hops, hits, misses in rows:
        points.append(
            [
                assume_utc(bucket).isoformat(),
                _ratio(hops, requests, AVG_HOPS_PLACES),
                _ratio(hits, hits + misses, RATE_PLACES),
            ]
        )
        total = [t + int(v) for t, v in zip(total, (requests, hops, hits, misses), strict=True)]
    requests, hops, hits, misses = total
    totals = {
        "requests": requests,
        "avg_hops": _ratio(hops, requests, AVG_HOPS_PLACES),
        "cache_hit_rate": _ratio(hits, hits + misses, RATE_PLACES),
    }
    return Answer({"points": points, "totals": totals}, rollup)


def _ms(micros: float) -> str:
    return f"{(Decimal(repr(float(micros))) / 1000).quantize(MS_PLACES, ROUND_HALF_UP):f}"


def latency(usage: UsageFilter) -> Answer:
    """p50/p95/p99 latency per layer and end to end of served requests (the SLA objectives to draw
    against them come from `latency_objectives`)."""
    rollup = usage.on_grain(INTERVALS["hour"])
    served, states = usage_sql.served_latency_quantiles(usage, list(LATENCY_LAYERS.values()), stored=rollup)
    layers = {
        layer: {
            name: (_ms(value) if served else None) for name, value in zip(PERCENTILES, values, strict=True)
        }
        for layer, values in zip(LATENCY_LAYERS, states, strict=True)
    }
    return Answer({"layers": layers}, rollup)


def latency_objectives(contracts: Iterable[Contract]) -> list[dict[str, Any]]:
    """The latency objectives governing the contracts (each contract's SLA policy:
    `sla.terms.policies_for`), one entry per objective with the contracts it governs."""
    contracts = list(contracts)
    policies = policies_for(contracts)
    governed: dict[int, list[str]] = defaultdict(list)
    for contract in sorted(contracts, key=lambda c: c.code):
        policy = policies.get(contract.pk)
        if policy is not None:
            governed[policy.pk].append(contract.code)
    objectives = Objective.objects.filter(policy_id__in=governed, kind=Objective.Kind.LATENCY)
    objectives = objectives.select_related("policy")
    return [
        {
            "policy": objective.policy.name,
            "objective": objective.name,
            "layer": SLA_LAYERS[objective.layer],
            "threshold_ms": f"{objective.threshold_ms:f}",
            "target_percent": f"{objective.target_percent:f}",
            "contracts": governed[objective.policy_id],
        }
        for objective in objectives.order_by("policy__name", "id")
    ]


def _places(value: float) -> str:
    return _fixed(Decimal(repr(float(value))), 3)


def subtrees(usage: UsageFilter) -> Answer:
    """The serving tree's subtrees that served the filter's records, each over time: per bucket
    (``timeline_bucket_s``) of its served requests, [time, P99 ms from arrival to answer, requests in
    flight, mean wait in line ms, answers]; and what the scheduler did to it, as its routers (those that
    decided these records) reported in [start, end): the scaling steps [time, desired replicas, kind],
    the borrows and returns [time, kind, executors], and the P99 objective last sent. Never another
    subtree, nor any figure of another tenant's requests."""
    bucket_s = timeline_bucket_s(usage.start, usage.end)
    found: dict[str, dict[str, Any]] = {}
    routes: set[tuple[str, str]] = set()
    for row in subtree_timeline(usage, bucket_s):
        series = found.setdefault(
            row.subtree,
            {"subtree": row.subtree, "sla_p99_ms": None, "service": [], "replicas": [], "moves": []},
        )
        values = [_places(row.p99_ms), _places(row.in_flight), _places(row.queue_ms), row.answers]
        series["service"].append([row.start.isoformat(), *values])
        routes.update((router, row.subtree) for router in row.routers)
    events, truncated = route_events(routes, usage.start, usage.end, SUBTREE_EVENTS_MAX)
    for event in events:
        series = found[event.subtree]
        if event.sla_p99_ms is not None:
            series["sla_p99_ms"] = _places(event.sla_p99_ms)
        at = event.at.isoformat()
        if event.desired_replicas is not None:
            series["replicas"].append([at, int(event.desired_replicas), event.kind])
        elif event.executors_moved is not None:
            series["moves"].append([at, event.kind, int(event.executors_moved)])
    body = {"bucket_s": bucket_s, "subtrees": list(found.values()), "events_truncated": truncated}
    return Answer(body, from_rollup=False)


def breakdown(usage: UsageFilter, by: str) -> Answer:
    """Totals of every dimension per contract, package or UTC day, as decimal strings."""
    rollup = usage.on_grain(INTERVALS["hour"])
    columns = [column for column, _, _ in BREAKDOWN_DIMENSIONS.values()]
    rows = usage_sql.breakdown_sums(usage, by, columns, stored=rollup)
    out = []
    for key, *values in rows:
        entry: dict[str, Any] = {"key": key.isoformat() if isinstance(key, date) else key}
        for name, value in zip(BREAKDOWN_DIMENSIONS, values, strict=True):
            _, divisor, places = BREAKDOWN_DIMENSIONS[name]
            entry[name] = _quantity(value, divisor, places)
        out.append(entry)
    return Answer({"by": by, "rows": out}, rollup)


def rollup_differences(start: date, end: date) -> list[dict[str, Any]]:
    """(tenant, contract, day) keys over [start, end) whose stored hourly rollup differs from the raw
    records (compared on every summed column), with both sides; [] when they agree."""
    return [asdict(difference) for difference in usage_sql.rollup_differences(start, end)]


def scoped_filter(
    principal: Principal,
    start: datetime,
    end: datetime,
    *,
    tenant: str | None = None,
    contract: str | None = None,
    package: str | None = None,
) -> tuple[UsageFilter, QuerySet[Contract]]:
    """The filter a principal may run, and the contracts it covers (lazy: only latency reads them).

    The list-filter rule (common.filters): a filter narrows what the caller may see and never looks up
    what it names. A customer sees its own tenant only, so naming another tenant, another tenant's
    contract, or a code nothing has, answers over no records, as naming nothing that exists does. Staff
    see every tenant, or the one named.
    """
    matches_nothing = not principal.is_staff and tenant is not None and tenant != principal.tenant_code
    if not principal.is_staff:
        tenant = principal.tenant_code
    contracts = Contract.objects.none() if matches_nothing else Contract.objects.production()
    if tenant is not None:
        contracts = contracts.filter(tenant__code=tenant)
    if contract is not None:
        contracts = contracts.filter(code=contract)
    if package is not None:
        contracts = contracts.filter(package__code=package)
    usage = UsageFilter(
        tenant=tenant,
        start=start,
        end=end,
        contract=contract,
        package=package,
        matches_nothing=matches_nothing,
    )
    return usage, contracts.only("pk", "code", "package_id")
