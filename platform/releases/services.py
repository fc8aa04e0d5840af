"""Writes: a release plan made by staff, its stages promoted (by hand, or by the gate task), held when
their gate fails (the customer is told by a signed webhook), and staff notes on a stage."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.db import IntegrityError, transaction

from accounts.access import Principal
from accounts.validators import SLUG_CODE
from catalog.models import PackageCapability
from contracts.models import Contract
from webhooks.services import publish_event

from .errors import ReleaseConflict, ReleaseError, ReleaseNotFound
from .gate import FAILED, PASSED, GateVerdict, judge_gate
from .models import GateEvaluation, ReleasePlan, ReleaseStage, StageCapability, StageNote

STAGE_HELD_EVENT = "release.stage_held"


@dataclass(frozen=True)
class CapabilitySpec:
    capability: str  # its code
    hourly_cap: int | None = None
    gated: bool = True


@dataclass(frozen=True)
class StageSpec:
    name: str
    capabilities: list[CapabilitySpec]
    billing_on: bool = False
    promotion: str = ReleaseStage.Promotion.MANUAL
    gate_min_acceptance: Decimal = Decimal(0)
    gate_min_calls: int = 0
    duration_hours: int | None = None


@dataclass(frozen=True)
class PlanSpec:
    code: str
    name: str
    contract: str
    package: str = ""  # empty: the contract's own
    stages: list[StageSpec] = field(default_factory=list)


def create_plan(*, spec: PlanSpec, now: datetime) -> ReleasePlan:
    """Staff make a plan for one package a contract holds; its first stage is in force at once. Refused:
    an unknown contract (404), a package the contract does not hold or a capability the package does not
    have (400), a plan already in force for that package or a code taken (409)."""
    if not SLUG_CODE.match(spec.code):
        raise ReleaseError(
            "invalid_code", "A plan code is 1-64 of a-z, 0-9, '.', '_', '-'.", {"field": "code"}
        )
    contract = Contract.objects.select_related("package", "tenant").filter(code=spec.contract).first()
    if contract is None:
        raise ReleaseNotFound("contract")
    held = {p.code: p for p in contract.held_packages()}
    package = held.get(spec.package or contract.package.code)
    if package is None:
        raise ReleaseError(
            "package_not_in_contract",
            f"The contract {contract.code} does not hold the package {spec.package}.",
            {"package": spec.package, "held": sorted(held)},
        )
    if not spec.stages:
        raise ReleaseError("no_stages", "A release plan needs at least one stage.", {"field": "stages"})
    capabilities = {
        pc.capability.code: pc.capability
        for pc in PackageCapability.objects.select_related("capability").filter(package=package)
    }
    for number, stage in enumerate(spec.stages, start=1):
        codes = [c.capability for c in stage.capabilities]
        unknown = sorted(set(codes) - set(capabilities))
        if unknown:
            raise ReleaseError(
                "capability_not_in_package",
                f"Stage {number} names capabilities the package {package.code} does not have.",
                {"stage": number, "capabilities": unknown, "package": package.code},
            )
        if len(set(codes)) != len(codes):
            raise ReleaseError(
                "duplicate_capability", f"Stage {number} names a capability twice.", {"stage": number}
            )
    try:
        with transaction.atomic():
            plan = ReleasePlan.objects.create(
                code=spec.code, name=spec.name, contract=contract, package=package
            )
            for number, stage in enumerate(spec.stages, start=1):
                row = ReleaseStage.objects.create(
                    plan=plan,
                    position=number,
                    name=stage.name,
                    billing_on=stage.billing_on,
                    promotion=stage.promotion,
                    gate_min_acceptance=stage.gate_min_acceptance,
                    gate_min_calls=stage.gate_min_calls,
                    duration_hours=stage.duration_hours,
                    **_started(now) if number == 1 else {},
                )
                StageCapability.objects.bulk_create(
                    StageCapability(
                        stage=row,
                        capability=capabilities[c.capability],
                        hourly_cap=c.hourly_cap,
                        gated=c.gated,
                    )
                    for c in stage.capabilities
                )
    except IntegrityError:
        if ReleasePlan.objects.filter(code=spec.code).exists():
            raise ReleaseConflict(
                "plan_exists", f"The plan code {spec.code} is taken.", {"code": spec.code}
            ) from None
        raise ReleaseConflict(
            "release_in_force",
            f"The package {package.code} of {contract.code} already has a release plan in force.",
            {"contract": contract.code, "package": package.code},
        ) from None
    return plan


def _started(now: datetime) -> dict[str, object]:
    return {"status": ReleaseStage.Status.ACTIVE, "started_at": now, "window_started_at": now}


def current_stage(plan: ReleasePlan) -> ReleaseStage | None:
    """The stage in force (active or held); None once the plan is complete."""
    return (
        plan.stages.filter(status__in=(ReleaseStage.Status.ACTIVE, ReleaseStage.Status.HELD))
        .order_by("position")
        .first()
    )


def promote_plan(*, plan: ReleasePlan, principal: Principal, now: datetime) -> ReleasePlan:
    """Promote the stage in force to the next (or complete the plan after the last), once its gate holds.
    A customer promotes only a stage whose promotion is manual; staff any. 409 otherwise, with a code:
    `plan_completed`, `promotion_automatic`, `gate_not_passed` (`details`: the gate's figures)."""
    with transaction.atomic():
        plan = ReleasePlan.objects.select_for_update().get(pk=plan.pk)
        stage = current_stage(plan)
        if plan.status == ReleasePlan.Status.COMPLETED or stage is None:
            raise ReleaseConflict("plan_completed", f"The plan {plan.code} is complete.")
        if stage.promotion == ReleaseStage.Promotion.AUTOMATIC and not principal.is_staff:
            raise ReleaseConflict(
                "promotion_automatic",
                f"Stage {stage.position} is promoted automatically once its gate holds.",
                {"stage": stage.position},
            )
        verdict = judge_gate(stage, now)
        if verdict.verdict != PASSED:
            raise ReleaseConflict(
                "gate_not_passed",
                f"The gate of stage {stage.position} does not hold ({verdict.reason or verdict.verdict}).",
                {"stage": stage.position, "gate": verdict.as_json()},
            )
        _advance(plan, stage, verdict, now)
    return plan


def _advance(plan: ReleasePlan, stage: ReleaseStage, verdict: GateVerdict, now: datetime) -> None:
    """The stage passed: the next one is in force from now, or the plan is complete."""
    _keep(stage, verdict, now)
    stage.status, stage.ended_at = ReleaseStage.Status.PASSED, now
    stage.save(update_fields=["status", "ended_at"])
    following = plan.stages.filter(position=stage.position + 1).first()
    if following is None:
        plan.status, plan.completed_at = ReleasePlan.Status.COMPLETED, now
        plan.save(update_fields=["status", "completed_at"])
        return
    for name, value in _started(now).items():
        setattr(following, name, value)
    following.save(update_fields=["status", "started_at", "window_started_at"])


def _keep(stage: ReleaseStage, verdict: GateVerdict, now: datetime) -> None:
    GateEvaluation.objects.create(
        stage=stage,
        verdict=verdict.verdict,
        figures=verdict.as_json(),
        window_start=verdict.window_start,
        window_end=verdict.window_end,
        evaluated_at=now,
    )


def hold_stage(stage: ReleaseStage, verdict: GateVerdict, now: datetime) -> None:
    """The gate failed: the stage stays in force (with its caps) but is held, its gate is judged again on
    the calls after now, and the customer's endpoints get `release.stage_held` (signed, once per hold)."""
    _keep(stage, verdict, now)
    stage.status, stage.window_started_at, stage.holds = ReleaseStage.Status.HELD, now, stage.holds + 1
    stage.save(update_fields=["status", "window_started_at", "holds"])
    plan = stage.plan
    publish_event(
        STAGE_HELD_EVENT,
        plan.contract.tenant,
        {
            "plan": plan.code,
            "contract": plan.contract.code,
            "package": plan.package.code,
            "stage": {"position": stage.position, "name": stage.name, "holds": stage.holds},
            "held_at": now.isoformat(),
            "gate": {
                "min_acceptance": str(stage.gate_min_acceptance),
                "min_calls": stage.gate_min_calls,
                **verdict.as_json(),
            },
        },
        f"{STAGE_HELD_EVENT}:{stage.pk}:{stage.holds}",
    )


def evaluate_stage(stage: ReleaseStage, now: datetime) -> GateVerdict:
    """Judge the gate of a stage in force and act on it: a failure holds it; a pass promotes an
    automatic stage and makes a held manual one active again (promotable)."""
    verdict = judge_gate(stage, now)
    with transaction.atomic():
        if verdict.verdict == FAILED:
            hold_stage(stage, verdict, now)
        elif verdict.verdict == PASSED and stage.promotion == ReleaseStage.Promotion.AUTOMATIC:
            _advance(ReleasePlan.objects.select_for_update().get(pk=stage.plan_id), stage, verdict, now)
        elif verdict.verdict == PASSED and stage.status == ReleaseStage.Status.HELD:
            _keep(stage, verdict, now)
            stage.status = ReleaseStage.Status.ACTIVE
            stage.save(update_fields=["status"])
    return verdict


def evaluate_release_gates(now: datetime) -> dict[str, str]:
    """Judge the stage in force of every active plan (the beat task): plan code → verdict."""
    verdicts: dict[str, str] = {}
    stages = ReleaseStage.objects.select_related("plan__contract__tenant", "plan__package").filter(
        plan__status=ReleasePlan.Status.ACTIVE,
        status__in=(ReleaseStage.Status.ACTIVE, ReleaseStage.Status.HELD),
    )
    for stage in stages.order_by("plan__code", "position"):
        if stage.plan.code not in verdicts:  # one stage in force per plan
            verdicts[stage.plan.code] = evaluate_stage(stage, now).verdict
    return verdicts


def add_stage_note(*, stage: ReleaseStage, text: str, author_id: int | None) -> StageNote:
    """A staff note on a stage; its report shows it."""
    return StageNote.objects.create(stage=stage, text=text, author_id=author_id)
