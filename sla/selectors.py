"""Reads for SLA: measurements from ClickHouse (one query per contract and window), stored reports."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet

from accounts.access import principal_of, scoped
from clickhouse_store.queries import sla as sla_sql
from contracts.models import Contract
from ledger.models import LogBatch, LogLeaf
from treemeter_records.timeutil import assume_utc, unix_nanos

from .models import CustomerDependency, DependencyCheck, Exclusion, Objective, SlaReport


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
        .select_related("contract", "declared_by", "detected_by")
        .order_by("starts_at", "id")
    )


def reports_for(request: Any) -> QuerySet[SlaReport]:
    """The reports a request may read: staff see every tenant's, others only their own tenant's."""
    reports = SlaReport.objects.select_related("contract", "contract__tenant", "contract__package")
    return scoped(reports, principal_of(request), "contract__tenant")


@dataclass(frozen=True)
class DependencyStatus:
    """A watched dependency as its customer sees it: its last check, since when it has been failing (if
    it is), and the exclusion an outage opened, while it is open."""

    dependency: CustomerDependency
    last_check: DependencyCheck | None
    failing_since: datetime | None
    open_outage: Exclusion | None

    @property
    def state(self) -> str:
        """unknown (never checked), healthy, failing, or outage (an exclusion is open)."""
        if self.open_outage is not None:
            return "outage"
        if self.last_check is None:
            return "unknown"
        return "healthy" if self.last_check.healthy else "failing"


def dependency_statuses(dependencies: QuerySet[CustomerDependency]) -> list[DependencyStatus]:
    statuses = []
    for dependency in dependencies.select_related("contract").order_by("contract__code"):
        last = dependency.checks.order_by("-checked_at", "-id").first()
        since = None
        if last is not None and not last.healthy:
            since = failing_since(dependency, last.checked_at)
        outage = dependency.outages.filter(closed=False).order_by("-starts_at").first()
        statuses.append(DependencyStatus(dependency, last, since, outage))
    return statuses


MAX_GAP = timedelta(minutes=2)  # a dependency's checks further apart than this are not consecutive
LOOKBACK = timedelta(days=1)  # how far back a run of failed checks is traced to its first


def failing_since(dependency: CustomerDependency, until: datetime) -> datetime:
    """When the run of consecutive failed checks that ends at `until` began (`until` if it did not)."""
    since = until
    recent = dependency.checks.filter(checked_at__lte=until, checked_at__gte=until - LOOKBACK)
    for checked_at, healthy in recent.order_by("-checked_at").values_list("checked_at", "healthy"):
        if healthy or since - checked_at > MAX_GAP:
            break
        since = checked_at
    return since


def outage_evidence(exclusion: Exclusion) -> dict[str, Any]:
    """What the platform holds for an exclusion's window: the signed batches its records came in (the
    SHA-256 of each raw batch body as received, and its agent and seqs), a digest of exactly which
    logged records fall in it, and the dependency watch's checks of the window."""
    contract = exclusion.contract
    leaves = list(
        LogLeaf.objects.filter(
            tenant=contract.tenant.code,
            contract=contract.code,
            start_ns__gte=unix_nanos(exclusion.starts_at),
            start_ns__lt=unix_nanos(exclusion.ends_at),
        )
        .order_by("index")
        .values_list("index", "leaf_hash", "batch_id")
    )
    batch_ids = sorted({batch for _, _, batch in leaves})
    batches = LogBatch.objects.filter(pk__in=batch_ids).select_related("agent").order_by("pk")
    checks = (
        exclusion.detected_by.checks.filter(
            checked_at__gte=exclusion.starts_at, checked_at__lte=exclusion.ends_at
        )
        if exclusion.detected_by is not None
        else DependencyCheck.objects.none()
    )
    return {
        "window": {"starts_at": exclusion.starts_at.isoformat(), "ends_at": exclusion.ends_at.isoformat()},
        "records": len(leaves),
        "log_indices": [leaves[0][0], leaves[-1][0]] if leaves else [],
        "leaf_hashes_sha256": hashlib.sha256(b"".join(bytes(h) for _, h, _ in leaves)).hexdigest(),
        "batches": [
            {
                "agent_id": b.agent.agent_id,
                "body_sha256": b.body_sha256,
                "first_seq": b.first_seq,
                "last_seq": b.last_seq,
            }
            for b in batches
        ],
        "checks": [
            {
                "checked_at": c.checked_at.isoformat(),
                "healthy": c.healthy,
                "status_code": c.status_code,
                "error": c.error,
            }
            for c in checks.order_by("checked_at", "id")
        ],
    }
