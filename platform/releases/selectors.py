"""Reads: the plans a principal sees, the release in force per contract package for the entitlement
snapshot (each agent's share of the hourly caps), the windows of gray usage for rating, and a stage's
report (resources, SLA attainment, the acceptance metric, staff notes)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Prefetch, Q, QuerySet

from accounts.access import Principal, scoped
from agents.models import Agent, AgentBinding
from clickhouse_store.queries.releases import StageFigures, stage_figures
from treemeter_records.timeutil import unix_nanos

from .errors import ReleaseNotFound
from .gate import share, stage_models
from .models import GateEvaluation, ReleasePlan, ReleaseStage, StageCapability


def visible_plans(principal: Principal) -> QuerySet[ReleasePlan]:
    """The plans of the principal's tenant's contracts (staff: all), their stages and capabilities."""
    stages = ReleaseStage.objects.prefetch_related(
        Prefetch("capabilities", queryset=StageCapability.objects.select_related("capability")), "notes"
    )
    plans = ReleasePlan.objects.select_related("contract__tenant", "package").prefetch_related(
        Prefetch("stages", queryset=stages)
    )
    return scoped(plans, principal, "contract__tenant")


def plan_of(principal: Principal, code: str) -> ReleasePlan:
    """The plan, if the principal sees it; ReleaseNotFound (404) otherwise, another tenant's included."""
    plan = visible_plans(principal).filter(code=code).first()
    if plan is None:
        raise ReleaseNotFound("release plan")
    return plan


def stage_of(plan: ReleasePlan, position: int) -> ReleaseStage:
    stage = next((s for s in plan.stages.all() if s.position == position), None)
    if stage is None:
        raise ReleaseNotFound("stage")
    return stage


@dataclass(frozen=True)
class ReleaseInForce:
    """What the snapshot carries for the keys of one contract package: the plan, the stage in force, and
    per model id that is on, this agent's share of its hourly cap and the whole cap (None: no cap)."""

    plan: str
    stage: int
    caps: dict[str, tuple[int | None, int | None]]

    def as_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "stage": self.stage,
            "models": [
                {"model_id": model_id, "hourly_cap": share, "plan_hourly_cap": whole}
                for model_id, (share, whole) in sorted(self.caps.items())
            ],
        }


def capshare(whole: int, agent_id: str, agents: list[str]) -> int:
    """An agent's share of an hourly cap among the executors that serve the contract: the cap divided
    evenly, the remainder to the first agents by id, so the shares add up to the cap exactly. An agent
    not among them (a router, say) gets the whole cap."""
    if agent_id not in agents:
        return whole
    share, remainder = divmod(whole, len(agents))
    return share + (1 if sorted(agents).index(agent_id) < remainder else 0)


def enforcing_agents(contract_ids: Iterable[int]) -> dict[int, list[str]]:
    """Contract id → the active executor agents bound to it (to it, or to its whole tenant), by id."""
    wanted = set(contract_ids)
    found: dict[int, set[str]] = {c: set() for c in wanted}
    bindings = AgentBinding.objects.filter(agent__active=True, agent__kind=Agent.Kind.EXECUTOR).values_list(
        "agent__agent_id", "contract_id", "tenant__contracts__id"
    )
    for agent_id, bound_contract, tenant_contract in bindings:
        contract = bound_contract if bound_contract is not None else tenant_contract
        if contract in wanted:
            found[contract].add(agent_id)
    return {c: sorted(agents) for c, agents in found.items()}


def releases_in_force(agent_id: str, contract_ids: Iterable[int]) -> dict[tuple[int, int], ReleaseInForce]:
    """(contract id, package id) → the release in force there, for the snapshot of agent `agent_id`."""
    stages = list(
        ReleaseStage.objects.select_related("plan")
        .prefetch_related(
            Prefetch("capabilities", queryset=StageCapability.objects.select_related("capability"))
        )
        .filter(
            plan__status=ReleasePlan.Status.ACTIVE,
            plan__contract_id__in=list(contract_ids),
            status__in=(ReleaseStage.Status.ACTIVE, ReleaseStage.Status.HELD),
        )
        .order_by("plan_id", "position")
    )
    agents = enforcing_agents({s.plan.contract_id for s in stages})
    found: dict[tuple[int, int], ReleaseInForce] = {}
    for stage in stages:
        slot = (stage.plan.contract_id, stage.plan.package_id)
        if slot in found:
            continue
        serving = agents.get(stage.plan.contract_id, [])
        caps = {
            s.capability.model_id: (
                None if s.hourly_cap is None else capshare(s.hourly_cap, agent_id, serving),
                s.hourly_cap,
            )
            for s in stage.capabilities.all()
        }
        found[slot] = ReleaseInForce(stage.plan.code, stage.position, caps)
    return found


@dataclass(frozen=True)
class GrayWindow:
    """A stage whose billing is off: its package's records of [starts_at, ends_at) are gray usage."""

    contract: str
    plan: str
    stage: int
    stage_name: str
    package: str
    starts_at: datetime
    ends_at: datetime

    def as_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "stage": self.stage,
            "name": self.stage_name,
            "package": self.package,
            "starts_at": self.starts_at.isoformat(),
            "ends_at": self.ends_at.isoformat(),
            "reason": "gray_release",
        }


def gray_windows(contracts: Iterable[str], start: datetime, end: datetime) -> dict[str, list[GrayWindow]]:
    """Contract code → its stages with billing off that overlap [start, end), clipped to it."""
    stages = (
        ReleaseStage.objects.select_related("plan__contract", "plan__package")
        .filter(plan__contract__code__in=list(contracts), billing_on=False, started_at__lt=end)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
        .order_by("plan__contract__code", "started_at", "id")
    )
    found: dict[str, list[GrayWindow]] = {}
    for stage in stages:
        window = GrayWindow(
            stage.plan.contract.code,
            stage.plan.code,
            stage.position,
            stage.name,
            stage.plan.package.code,
            max(stage.started_at or start, start),
            min(stage.ended_at or end, end),
        )
        found.setdefault(window.contract, []).append(window)
    return found


@dataclass(frozen=True)
class CapabilityReport:
    capability: str
    name: str
    model_id: str
    hourly_cap: int | None
    rule: str
    sla_timeout_ms: int
    figures: StageFigures

    @property
    def availability(self) -> Decimal | None:
        """Successful calls ÷ calls (rejected and cancelled ones are not calls)."""
        return share(self.figures.ok, self.figures.calls)

    @property
    def within_sla(self) -> Decimal | None:
        """Successful calls that ended within the SLA timeout ÷ successful calls."""
        return share(self.figures.within_sla, self.figures.ok)

    @property
    def acceptance(self) -> Decimal | None:
        return share(self.figures.accepted, self.figures.calls)

    @property
    def l3_seconds(self) -> Decimal:
        return (Decimal(self.figures.l3_us) / 1_000_000).quantize(Decimal("0.001"))


@dataclass(frozen=True)
class StageReport:
    plan: ReleasePlan
    stage: ReleaseStage
    start: datetime
    end: datetime
    capabilities: list[CapabilityReport]
    evaluations: list[GateEvaluation]

    @property
    def totals(self) -> dict[str, Any]:
        figures = [c.figures for c in self.capabilities]
        return {
            "calls": sum(f.calls for f in figures),
            "rejected": sum(f.rejected for f in figures),
            "tokens_in": sum(f.tokens_in for f in figures),
            "tokens_out": sum(f.tokens_out for f in figures),
            "l3_seconds": sum((c.l3_seconds for c in self.capabilities), Decimal(0)),
        }


def stage_report(plan: ReleasePlan, stage: ReleaseStage, now: datetime) -> StageReport:
    """The stage's figures over its whole run (its start to its end, or now), per capability that is on:
    one query; the gate's judgements and the staff notes beside them."""
    start = stage.started_at or now
    end = stage.ended_at or now
    held = list(stage.capabilities.all())
    figures = stage_figures(
        plan.contract.tenant.code,
        plan.contract.code,
        plan.package.code,
        unix_nanos(start),
        unix_nanos(end),
        stage_models(held),
    )
    reports = [
        CapabilityReport(
            s.capability.code,
            s.capability.name,
            s.capability.model_id,
            s.hourly_cap,
            s.capability.acceptance_rule,
            s.capability.sla_timeout_ms,
            figures.get(s.capability.model_id)
            or StageFigures(s.capability.model_id, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0),
        )
        for s in held
    ]
    return StageReport(plan, stage, start, end, reports, list(stage.evaluations.all()))
