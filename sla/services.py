"""Writes for SLA: stored reports, period close with service credits, exclusions, burn-rate alerts."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import ROUND_DOWN, Decimal
from fractions import Fraction
from typing import Any
from zoneinfo import ZoneInfo

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.access import Principal, scoped
from common.errors import ApiError
from common.money import round_money
from common.periods import month_bounds
from contracts.models import Contract
from ingest.outbox import store_pending

from .fees import period_fee
from .models import Exclusion, ExclusionAppeal, Objective, ServiceCredit, SlaPolicy, SlaReport
from .provenance import covering_checkpoint
from .selectors import Measurement, ObjectiveCounts, exclusions_overlapping, measure, outage_evidence
from .terms import credit_percent, policy_for, ratio_percent

# Agents buffer and retry, so records arrive a little late: a month's report becomes final this long
# after the month ends (before that it stays provisional and is recomputed).
SETTLE = timedelta(hours=1)


class AppealError(ApiError):
    """An appeal that cannot be opened: its HTTP status, a stable code and a message."""

    def __init__(self, http_status: int, code: str, message: str) -> None:
        super().__init__(code, message)
        self.http_status = http_status


class SlaError(ValueError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _percent_text(value: Fraction | None) -> str | None:
    """Rounded down to 4 places, so 99.89999 % never shows as a met 99.9 %. (Also used for budgets.)"""
    if value is None:
        return None
    return str(
        (Decimal(value.numerator) / Decimal(value.denominator)).quantize(Decimal("0.0001"), ROUND_DOWN)
    )


def _terms_snapshot(policy: SlaPolicy, objectives: list[Objective]) -> dict[str, Any]:
    return {
        "policy": policy.name,
        "time_zone": policy.time_zone,
        "objectives": [
            {
                "name": o.name,
                "kind": o.kind,
                "layer": o.layer,
                "threshold_ms": None if o.threshold_ms is None else str(o.threshold_ms),
                "target_percent": str(o.target_percent),
                "timeslice_minutes": o.timeslice_minutes,
                "timeslice_target_percent": (
                    None if o.timeslice_target_percent is None else str(o.timeslice_target_percent)
                ),
                "credit_ladder": [
                    {"below_percent": str(s.below_percent), "credit_percent": str(s.credit_percent)}
                    for s in o.credit_steps.all()
                ],
            }
            for o in objectives
        ],
    }


def _objective_result(objective: Objective, counts: ObjectiveCounts, window: timedelta) -> dict[str, Any]:
    """Measured value, error budget and budget spent; over requests, or over slices when time-sliced."""
    if counts.slices is not None and objective.timeslice_minutes and objective.timeslice_target_percent:
        total = math.ceil(window / timedelta(minutes=objective.timeslice_minutes))
        slice_target = Fraction(objective.timeslice_target_percent)
        bad = sum(1 for e, g in counts.slices.values() if e and Fraction(100 * g, e) < slice_target)
        unit, eligible, good = "timeslices", total, total - bad
    else:
        unit, eligible, good = "requests", counts.eligible, counts.good
    measured = ratio_percent(good, eligible)
    budget = (100 - Fraction(objective.target_percent)) / 100 * eligible
    bad_count = eligible - good
    spent = Fraction(0) if bad_count == 0 else (None if budget == 0 else Fraction(100) * bad_count / budget)
    steps = list(objective.credit_steps.all())
    return {
        "name": objective.name,
        "kind": objective.kind,
        "layer": objective.layer,
        "threshold_ms": None if objective.threshold_ms is None else str(objective.threshold_ms),
        "unit": unit,
        "eligible": eligible,
        "good": good,
        "bad": bad_count,
        "measured_percent": _percent_text(measured),
        "target_percent": str(objective.target_percent),
        "met": measured is None or measured >= Fraction(objective.target_percent),
        "error_budget": _percent_text(budget),
        "budget_spent_percent": _percent_text(spent),
        "credit_percent": str(credit_percent(measured, steps)),
    }


def _daily(
    measurement: Measurement, objectives: list[Objective], start: datetime, end: datetime, tz: str
) -> list[dict[str, Any]]:
    """Every local day of the window, with each objective's eligible and good counts (0 without traffic)."""
    zone = ZoneInfo(tz)
    first, last = start.astimezone(zone).date(), (end - timedelta(microseconds=1)).astimezone(zone).date()
    days = []
    day: date = first
    while day <= last:
        counts = measurement.daily.get(day, [(0, 0)] * len(objectives))
        days.append(
            {
                "day": day.isoformat(),
                "objectives": {
                    o.name: {"eligible": e, "good": g, "percent": _percent_text(ratio_percent(g, e))}
                    for o, (e, g) in zip(objectives, counts, strict=True)
                },
            }
        )
        day += timedelta(days=1)
    return days


def _exclusion_snapshot(exclusions: list[Exclusion]) -> list[dict[str, Any]]:
    return [
        {
            "id": x.pk,
            "kind": x.kind,
            "scope": x.scope,
            "starts_at": x.starts_at.isoformat(),
            "ends_at": x.ends_at.isoformat(),
            "reason": x.reason,
            "declared_by": x.declared_by.get_username() if x.declared_by else "",
            "detected_by": x.detected_by.name if x.detected_by else "",
            "declared_at": x.declared_at.isoformat(),
        }
        for x in exclusions
    ]


def compute_report(contract: Contract, month: str, *, now: datetime | None = None) -> SlaReport:
    """Measure the contract's SLA for a local month and store it; a final report is never recomputed.

    Provisional while the month is open (recomputing replaces it), final from SETTLE after it ends.
    """
    now = now or timezone.now()
    store_pending()  # every committed record is in ClickHouse before it is measured
    policy = policy_for(contract)
    if policy is None:
        raise SlaError("no_sla", f"Contract {contract.code} has no SLA policy (on itself or its package).")
    existing = SlaReport.objects.filter(contract=contract, month=month).first()
    if existing is not None and existing.status == SlaReport.Status.FINAL:
        return _with_checkpoint(existing)
    start, end = month_bounds(month, policy.time_zone)
    if start > now:
        raise SlaError("period_not_started", f"The SLA month {month} has not started yet.")
    objectives = list(policy.objectives.prefetch_related("credit_steps"))
    exclusions = exclusions_overlapping(contract, start, end)
    measurement = measure(contract, objectives, start, end, exclusions, policy.time_zone)
    results = [
        _objective_result(o, c, end - start) for o, c in zip(objectives, measurement.objectives, strict=True)
    ]
    credit = min(max((Decimal(r["credit_percent"]) for r in results), default=Decimal(0)), Decimal(100))
    values = {
        "time_zone": policy.time_zone,
        "period_start": start,
        "period_end": end,
        "status": SlaReport.Status.FINAL if end + SETTLE <= now else SlaReport.Status.PROVISIONAL,
        "record_count": measurement.record_count,
        "rejected_count": measurement.rejected_count,
        "excluded_count": measurement.excluded_count,
        "valid_count": measurement.valid_count,
        "terms": _terms_snapshot(policy, objectives),
        "objectives": results,
        "percentiles_ms": {
            layer: {q: str(v) for q, v in points.items()}
            for layer, points in measurement.percentiles_ms.items()
        },
        "daily": _daily(measurement, objectives, start, end, policy.time_zone),
        "exclusions": _exclusion_snapshot(exclusions),
        "credit_percent": credit,
        "data_watermark": measurement.data_watermark,
        "ledger_checkpoint": covering_checkpoint(contract, start, end),
        "computed_at": now,
    }
    with transaction.atomic():
        locked = SlaReport.objects.select_for_update().filter(contract=contract, month=month).first()
        if locked is not None and locked.status == SlaReport.Status.FINAL:
            return locked
        if locked is None:
            try:
                with transaction.atomic():
                    return SlaReport.objects.create(contract=contract, month=month, **values)
            except IntegrityError:  # a concurrent run stored it first
                return SlaReport.objects.get(contract=contract, month=month)
        for field, value in values.items():
            setattr(locked, field, value)
        locked.save()
        return locked


def _with_checkpoint(report: SlaReport) -> SlaReport:
    """A final report's measured values never change; its ledger checkpoint is filled in once published."""
    if not report.ledger_checkpoint:
        checkpoint = covering_checkpoint(report.contract, report.period_start, report.period_end)
        if checkpoint:
            SlaReport.objects.filter(pk=report.pk, ledger_checkpoint="").update(ledger_checkpoint=checkpoint)
            report.ledger_checkpoint = checkpoint
    return report


@dataclass(frozen=True)
class CloseResult:
    report: SlaReport
    credit: ServiceCredit | None
    waiting_for_invoice: bool


def close_period(contract: Contract, month: str, *, now: datetime | None = None) -> CloseResult:
    """Finalise the month's report and turn an earned credit into one ServiceCredit. Safe to rerun.

    The credit needs the month's fee, which billing's invoice gives; until it exists the result says
    `waiting_for_invoice` and a later run (the beat job reruns every day) creates the credit.
    """
    now = now or timezone.now()
    report = compute_report(contract, month, now=now)
    if report.status != SlaReport.Status.FINAL:
        raise SlaError("period_open", f"The SLA month {month} of {contract.code} has not closed yet.")
    if report.credit_percent == 0:
        return CloseResult(report=report, credit=None, waiting_for_invoice=False)
    existing = ServiceCredit.objects.filter(contract=contract, month=month).first()
    if existing is not None:
        return CloseResult(report=report, credit=existing, waiting_for_invoice=False)
    fee = period_fee(contract, month)
    if fee is None:
        return CloseResult(report=report, credit=None, waiting_for_invoice=True)
    amount = round_money(fee * report.credit_percent / 100, contract.currency)
    try:
        with transaction.atomic():
            credit = ServiceCredit.objects.create(
                contract=contract,
                report=report,
                month=month,
                credit_percent=report.credit_percent,
                fee_basis=fee,
                amount=amount,
                currency=contract.currency,
                description=f"SLA service credit {report.credit_percent.normalize()} % for {month} "
                f"(SLA report #{report.pk})",
            )
    except IntegrityError:  # a concurrent close stored it first
        credit = ServiceCredit.objects.get(contract=contract, month=month)
    return CloseResult(report=report, credit=credit, waiting_for_invoice=False)


def declare_exclusion(
    contract: Contract,
    *,
    kind: str,
    starts_at: datetime,
    ends_at: datetime,
    reason: str,
    declared_by: User,
    scope: str = Exclusion.Scope.ALL,
) -> tuple[Exclusion, bool]:
    """Record an exclusion; it applies to reports computed from now on (final reports do not change).

    Retry-safe: declaring the same exclusion again (contract, kind, scope, window, reason) returns the
    first one, and False for "created".
    """
    same = Exclusion.objects.filter(
        contract=contract, kind=kind, scope=scope, starts_at=starts_at, ends_at=ends_at, reason=reason
    ).first()
    if same is not None:
        return same, False
    exclusion = Exclusion(
        contract=contract,
        kind=kind,
        scope=scope,
        starts_at=starts_at,
        ends_at=ends_at,
        reason=reason,
        declared_by=declared_by,
    )
    exclusion.full_clean()
    exclusion.save()
    return exclusion, True


def appeal_exclusion(user: User, principal: Principal, exclusion_id: int, reason: str) -> ExclusionAppeal:
    """A customer contests one of its contract's exclusions; the window's evidence is attached at once
    (`selectors.outage_evidence`). Retry: an exclusion has at most one open appeal; appealing again
    answers 409 appeal_open."""
    exclusions = Exclusion.objects.select_related("contract__tenant", "detected_by").filter(pk=exclusion_id)
    exclusion = scoped(exclusions, principal, "contract__tenant").first()
    if exclusion is None:
        raise AppealError(404, "unknown_exclusion", f"No exclusion {exclusion_id}.")
    if not reason.strip():
        raise AppealError(400, "invalid_request", "Say why the exclusion is wrong.")
    try:
        with transaction.atomic():
            return ExclusionAppeal.objects.create(
                exclusion=exclusion, reason=reason, evidence=outage_evidence(exclusion), opened_by=user
            )
    except IntegrityError:
        raise AppealError(
            409, "appeal_open", f"Exclusion {exclusion_id} already has an open appeal."
        ) from None
