"""Celery jobs: close SLA months into reports and credits, evaluate burn-rate alerts, and watch the
customers' dependencies."""

from __future__ import annotations

from datetime import datetime

from celery import shared_task
from django.db.models import Q, QuerySet
from django.utils import timezone

from common.periods import month_bounds, month_of, previous_month
from contracts.models import Contract

from .alerts import evaluate_policy_burn_rates
from .dependencies import watch
from .health import evaluate_health
from .models import CustomerDependency, SlaPolicy
from .services import SETTLE, close_period
from .terms import policy_for


def contracts_with_sla() -> QuerySet[Contract]:
    return (
        Contract.objects.billable()
        .filter(Q(sla_policy__isnull=False) | Q(package__sla_policy__isnull=False))
        .select_related("tenant", "package")
        .order_by("code")
    )


@shared_task(name="sla.close_period")
def close_period_task(contract_code: str, month: str) -> dict[str, object]:
    """Close one contract's SLA month (safe to retry): the report id and the credit id, if any."""
    result = close_period(Contract.objects.select_related("tenant").get(code=contract_code), month)
    return {
        "report": result.report.pk,
        "credit": None if result.credit is None else result.credit.pk,
        "waiting_for_invoice": result.waiting_for_invoice,
    }


@shared_task(name="sla.close_due_periods")
def close_due_periods_task(now_iso: str | None = None) -> int:
    """Beat job: close every SLA contract's previous local month; reruns are no-ops. Returns how many."""
    now = datetime.fromisoformat(now_iso) if now_iso else timezone.now()
    closed = 0
    for contract in contracts_with_sla():
        policy = policy_for(contract)
        if policy is None:
            continue
        month = previous_month(month_of(now, policy.time_zone))
        end = month_bounds(month, policy.time_zone)[1]
        if contract.starts_at >= end or end + SETTLE > now:
            continue  # the contract had not started in that month, or the month is still settling
        close_period(contract, month, now=now)
        closed += 1
    return closed


@shared_task(name="sla.evaluate_burn_rates")
def evaluate_burn_rates_task(now_iso: str | None = None) -> int:
    """Beat job (every minute): burn-rate rules, route jitter and expert health of every active SLA
    contract, a few queries per policy (not per contract). Returns how many alerts are open."""
    now = datetime.fromisoformat(now_iso) if now_iso else timezone.now()
    by_policy: dict[int, tuple[SlaPolicy, list[Contract]]] = {}
    for contract in contracts_with_sla().filter(status=Contract.Status.ACTIVE):
        policy = policy_for(contract)
        if policy is not None:
            by_policy.setdefault(policy.pk, (policy, []))[1].append(contract)
    open_alerts = 0
    for policy, contracts in by_policy.values():
        open_alerts += sum(evaluate_policy_burn_rates(policy, contracts, now=now).values())
        open_alerts += sum(evaluate_health(contracts, now=now).values())
    return open_alerts


@shared_task(name="sla.watch_dependency")
def watch_dependency_task(dependency_id: int, now_iso: str) -> str:
    """Probe one customer dependency at `now_iso` and apply the outage rule: 'healthy' or 'failed'."""
    dependency = CustomerDependency.objects.select_related("contract__tenant").get(pk=dependency_id)
    exclusion = watch(dependency, datetime.fromisoformat(now_iso))
    latest = dependency.checks.order_by("-checked_at", "-id").first()
    state = "healthy" if latest is not None and latest.healthy else "failed"
    return state if exclusion is None else f"{state} (exclusion {exclusion.pk})"


@shared_task(name="sla.watch_dependencies")
def watch_dependencies_task(now_iso: str | None = None) -> int:
    """Beat job (every minute): one probe task per dependency of a served contract, all for the same
    instant, so a slow dependency delays no other. Returns how many were queued."""
    now = now_iso or timezone.now().isoformat()
    dependencies = CustomerDependency.objects.filter(contract__status=Contract.Status.ACTIVE).order_by("pk")
    queued = 0
    for pk in dependencies.values_list("pk", flat=True):
        watch_dependency_task.delay(pk, now)
        queued += 1
    return queued
