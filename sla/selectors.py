"""Reads for SLA: measurements from ClickHouse (one query per contract and window), stored reports."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet

from accounts.access import principal_of, scoped
from clickhouse_store.queries import sla as sla_sql
from contracts.models import Contract
from treemeter_records.timeutil import assume_utc, unix_nanos

from .models import Exclusion, Objective, SlaReport


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


def indicator(objective: Objective) -> sla_sql.Indicator:
    """The objective as its queries count it (see `Objective`: availability, or one layer's latency)."""
    if objective.kind == Objective.Kind.AVAILABILITY:
        return sla_sql.Indicator(timeslice_minutes=objective.timeslice_minutes)
    if objective.threshold_ms is None:
        raise ValueError(f"latency objective {objective.name} has no threshold")
    return sla_sql.Indicator(
        layer=objective.layer,
        threshold_us=int(objective.threshold_ms * 1000),
        timeslice_minutes=objective.timeslice_minutes,
    )


def exclusion_windows(exclusions: Sequence[Exclusion]) -> list[sla_sql.ExclusionWindow]:
    """The exclusions as their queries apply them (each to its own contract)."""
    return [
        sla_sql.ExclusionWindow(
            contract=x.contract.code,
            start_ns=unix_nanos(x.starts_at),
            end_ns=unix_nanos(x.ends_at),
            failed_only=x.scope == Exclusion.Scope.FAILED,
        )
        for x in exclusions
    ]


def contract_codes(contracts: Sequence[Contract]) -> tuple[list[str], list[str]]:
    """The contracts' tenants (sorted, each once) and the contracts' own codes, as the queries take them."""
    return sorted({c.tenant.code for c in contracts}), [c.code for c in contracts]


def _ms(micros: int) -> Decimal:
    return Decimal(micros) / 1000


def measure(
    contract: Contract,
    objectives: Sequence[Objective],
    start: datetime,
    end: datetime,
    exclusions: Sequence[Exclusion],
    time_zone: str,
) -> Measurement:
    """Counts, good counts per objective, exact percentiles per layer, daily and slice counts: one query."""
    row = sla_sql.measurement(
        contract.tenant.code,
        contract.code,
        [indicator(o) for o in objectives],
        start,
        end,
        exclusion_windows(exclusions),
        time_zone,
    )
    served = row.served > 0
    percentiles = {
        layer: ({q: _ms(v) for q, v in values.items()} if served else {})
        for layer, values in row.percentiles_us.items()
    }
    return Measurement(
        record_count=row.records,
        rejected_count=row.rejected,
        excluded_count=row.excluded,
        valid_count=row.valid,
        objectives=[
            ObjectiveCounts(eligible=eligible, good=good, slices=slices)
            for (eligible, good), slices in zip(row.counts, row.slices, strict=True)
        ],
        percentiles_ms=percentiles,
        daily=row.daily,
        data_watermark=None if row.watermark is None else assume_utc(row.watermark),
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
    return scoped(reports, principal_of(request), "contract__tenant")
