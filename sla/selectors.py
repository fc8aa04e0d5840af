"""Reads for SLA: measurements from ClickHouse (one query per contract and window), stored reports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet

from accounts.access import visible_tenant_ids
from clickhouse_store import query
from contracts.models import Contract
from treemeter_records.timeutil import assume_utc

from .models import Exclusion, Objective, SlaReport
from .sli import EXCLUDED, LATENCY_US, VALID, VALID_ALIAS, exclusion_params, indicator

QUANTILES = ("0.5", "0.9", "0.95", "0.99", "0.999")


@dataclass(frozen=True)
class ObjectiveCounts:
    eligible: int
    good: int
    # {slice start (UTC): (eligible, good)} for time-sliced objectives, else None.
    slices: dict[datetime, tuple[int, int]] | None


@dataclass(frozen=True)
class Measurement:
    record_count: int
    rejected_count: int
    excluded_count: int
    valid_count: int
    objectives: list[ObjectiveCounts]
    # {layer: {quantile: ms}}; empty dicts when no request was served.
    percentiles_ms: dict[str, dict[str, Decimal]]
    # {local day: [(eligible, good) per objective]}
    daily: dict[date, list[tuple[int, int]]]
    data_watermark: datetime | None


def _measurement_sql(objectives: Sequence[Objective]) -> tuple[str, dict[str, Any]]:
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
    for i, objective in enumerate(objectives):
        ind = indicator(objective, i)
        params.update(ind.params)
        inner += [f"toUInt64({ind.eligible}) AS e_{i}", f"toUInt64({ind.good}) AS g_{i}"]
        outer += [f"sum(e_{i}) AS eligible_{i}", f"sum(g_{i}) AS good_{i}"]
        day_arrays += [f"[e_{i}]", f"[g_{i}]"]
        if objective.timeslice_minutes:
            params[f"slice_{i}"] = objective.timeslice_minutes
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


def _ms(micros: Any) -> Decimal:
    return Decimal(int(micros)) / 1000


def measure(
    contract: Contract,
    objectives: Sequence[Objective],
    start: datetime,
    end: datetime,
    exclusions: Sequence[Exclusion],
    time_zone: str,
) -> Measurement:
    """Counts, good counts per objective, exact percentiles per layer, daily and slice counts: one query."""
    sql, params = _measurement_sql(objectives)
    params.update(exclusion_params(exclusions))
    params.update({"tenant": contract.tenant.code, "contract": contract.code, "start": start, "end": end})
    if objectives:
        params["tz"] = time_zone
    (row,) = query.select_dicts(sql, params)
    served = int(row["served"]) > 0
    percentiles = {
        layer: ({q: _ms(v) for q, v in zip(QUANTILES, row[f"q_{layer}"], strict=True)} if served else {})
        for layer in LATENCY_US
    }
    counts = []
    for i, objective in enumerate(objectives):
        slices = None
        if objective.timeslice_minutes:
            keys, eligible, good = row[f"slices_{i}"]
            slices = {k: (int(e), int(g)) for k, e, g in zip(keys, eligible, good, strict=True)}
        counts.append(
            ObjectiveCounts(eligible=int(row[f"eligible_{i}"]), good=int(row[f"good_{i}"]), slices=slices)
        )
    daily: dict[date, list[tuple[int, int]]] = {}
    if objectives:
        days, *arrays = row["daily"]
        for j, day in enumerate(days):
            daily[day] = [(int(arrays[2 * i][j]), int(arrays[2 * i + 1][j])) for i in range(len(objectives))]
    return Measurement(
        record_count=int(row["records"]),
        rejected_count=int(row["rejected"]),
        excluded_count=int(row["excluded"]),
        valid_count=int(row["valid"]),
        objectives=counts,
        percentiles_ms=percentiles,
        daily=daily,
        data_watermark=None if row["watermark"] is None else assume_utc(row["watermark"]),
    )


def exclusions_overlapping(contract: Contract, start: datetime, end: datetime) -> list[Exclusion]:
    return exclusions_of([contract], start, end)


def exclusions_of(contracts: Sequence[Contract], start: datetime, end: datetime) -> list[Exclusion]:
    """The contracts' exclusions overlapping [start, end)."""
    return list(
        Exclusion.objects.filter(contract__in=contracts, starts_at__lt=end, ends_at__gt=start)
        .select_related("contract", "declared_by")
        .order_by("starts_at", "id")
    )


def reports_for(request: Any) -> QuerySet[SlaReport]:
    """The reports a request may read: staff see every tenant's, others only their own tenant's."""
    reports = SlaReport.objects.select_related("contract", "contract__tenant", "contract__package")
    tenant_ids = visible_tenant_ids(request)
    return reports if tenant_ids is None else reports.filter(contract__tenant_id__in=tenant_ids)
