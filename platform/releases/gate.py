"""A stage's quality gate, judged over its records: for each gated capability, the share of its calls
that the capability's acceptance rule accepts, once it has enough calls."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from clickhouse_store.queries.releases import StageFigures, StageModel, stage_figures
from pricing.expressions import parse_metric
from treemeter_records.timeutil import unix_nanos

from .models import ReleaseStage, StageCapability

PENDING, PASSED, FAILED = "pending", "passed", "failed"
BELOW_THRESHOLD, NOT_ENOUGH_CALLS = "below_threshold", "not_enough_calls"
SHARE_PLACES = Decimal("0.0001")


@dataclass(frozen=True)
class CapabilityGate:
    capability: str
    model_id: str
    rule: str
    calls: int
    accepted: int
    enough: bool  # calls ≥ the stage's minimum
    holds: bool  # enough, and the accepted share reaches the threshold

    @property
    def acceptance(self) -> Decimal | None:
        return share(self.accepted, self.calls)

    def as_json(self) -> dict[str, Any]:
        share = self.acceptance
        return {
            "capability": self.capability,
            "model_id": self.model_id,
            "rule": self.rule,
            "calls": self.calls,
            "accepted": self.accepted,
            "acceptance": None if share is None else str(share),
            "holds": self.holds,
        }


@dataclass(frozen=True)
class GateVerdict:
    verdict: str  # PENDING, PASSED or FAILED
    reason: str  # why it failed: BELOW_THRESHOLD or NOT_ENOUGH_CALLS ('' otherwise)
    window_start: datetime
    window_end: datetime
    capabilities: tuple[CapabilityGate, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "window_start": self.window_start.isoformat(),
            "window_end": self.window_end.isoformat(),
            "capabilities": [c.as_json() for c in self.capabilities],
        }


def share(part: int, whole: int) -> Decimal | None:
    """part ÷ whole to 4 places; None of nothing (a gate's acceptance, a report's shares)."""
    return (Decimal(part) / whole).quantize(SHARE_PLACES) if whole else None


def stage_models(held: list[StageCapability]) -> list[StageModel]:
    """What the stage query needs of these capabilities: model, parsed acceptance rule, SLA timeout."""
    return [
        StageModel(
            s.capability.model_id,
            parse_metric(s.capability.acceptance_rule, rule=True) if s.capability.acceptance_rule else None,
            s.capability.sla_timeout_ms,
        )
        for s in held
    ]


def time_is_up(stage: ReleaseStage, now: datetime) -> bool:
    """Whether the stage's duration has run out since its gate's window opened."""
    opened = stage.window_started_at
    return (
        stage.duration_hours is not None
        and opened is not None
        and now >= opened + timedelta(hours=stage.duration_hours)
    )


def judge_gate(stage: ReleaseStage, now: datetime) -> GateVerdict:
    """The gate over the stage's records since its window opened (one query). It fails when a gated
    capability has enough calls and too few are accepted, or when the stage's time is up before every
    gated capability had enough; it passes when every one has enough and reaches the threshold."""
    start = stage.window_started_at or stage.started_at or now
    gated = [s for s in stage.capabilities.select_related("capability") if s.gated]
    plan = stage.plan
    figures = stage_figures(
        plan.contract.tenant.code,
        plan.contract.code,
        plan.package.code,
        unix_nanos(start),
        unix_nanos(now),
        stage_models(gated),
    )
    judged = tuple(_judge(stage, s, figures.get(s.capability.model_id)) for s in gated)
    if any(c.enough and not c.holds for c in judged):
        verdict, reason = FAILED, BELOW_THRESHOLD
    elif all(c.holds for c in judged):
        verdict, reason = PASSED, ""
    elif time_is_up(stage, now):
        verdict, reason = FAILED, NOT_ENOUGH_CALLS
    else:
        verdict, reason = PENDING, ""
    return GateVerdict(verdict, reason, start, now, judged)


def _judge(stage: ReleaseStage, held: StageCapability, figures: StageFigures | None) -> CapabilityGate:
    calls = figures.calls if figures is not None else 0
    accepted = figures.accepted if figures is not None else 0
    enough = calls >= stage.gate_min_calls
    reaches = accepted >= stage.gate_min_acceptance * calls  # exact: no rounded share decides
    return CapabilityGate(
        held.capability.code,
        held.capability.model_id,
        held.capability.acceptance_rule,
        calls,
        accepted,
        enough,
        enough and reaches,
    )
