"""Writes of a tenant's sandbox: open it on a combination of packages, issue its keys, change its daily
traffic, reset its data. Its contract is a sandbox contract (`Contract.sandbox`): ingest stores its
records apart (`sandbox_records`), and it is never invoiced, reported on or exported."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.access import Principal
from agents.models import AgentBinding
from catalog.models import PackagePlan
from catalog.selectors import active_packages
from clickhouse_store.queries.sandbox import delete_sandbox_records
from contracts.models import Contract, ContractPackage
from contracts.services import set_plan_charge
from entitlements.services import IssuedKey, issue_api_key

from .errors import SandboxError, SandboxExists
from .models import MAX_DAILY_EVENTS, Sandbox

MAX_PACKAGES = 8


def open_sandbox(principal: Principal, packages: Sequence[str], daily_events: int = 1000) -> Sandbox:
    """The tenant's sandbox on these packages (each one it could buy, its first active plan's prices
    copied, the first package's price winning where two price one dimension), with a simulator key per
    package. One per tenant: a second call answers 409 `sandbox_exists` and changes nothing."""
    if principal.tenant is None:
        raise SandboxError("tenant_required", "A sandbox belongs to a tenant; staff users cannot open one.")
    _check_daily(daily_events)
    plans = _plans(principal, packages)
    currency = plans[0].currency
    if any(plan.currency != currency for plan in plans):
        raise SandboxError(
            "currency_mismatch",
            f"The packages' plans are priced in {', '.join(sorted({p.currency for p in plans}))}: "
            "a sandbox bills in one currency.",
            {"currencies": sorted({p.currency for p in plans})},
        )
    tenant = principal.tenant
    now = timezone.now()
    try:
        with transaction.atomic():
            contract = Contract.objects.create(
                code=f"sandbox-{tenant.code[:40]}-{secrets.token_hex(4)}",
                tenant=tenant,
                package=plans[0].package,
                currency=currency,
                base_fee=sum((p.base_fee for p in plans), Decimal(0)),
                starts_at=datetime(now.year, now.month, 1, tzinfo=UTC),
                sandbox=True,
            )
            for plan in plans[1:]:
                ContractPackage.objects.create(contract=contract, package=plan.package)
            priced: set[str] = set()
            for plan in plans:
                for price in plan.prices.all():
                    if price.dimension in priced:
                        continue
                    priced.add(price.dimension)
                    set_plan_charge(contract, price)
            _bind_serving_agents(contract)
            keys = {
                plan.package.code: _key(contract, plan.package.code, "sandbox simulator").secret
                for plan in plans
            }
            return Sandbox.objects.create(
                tenant=tenant,
                contract=contract,
                daily_events=daily_events,
                simulator_keys=keys,
                plans={plan.package.code: plan.code for plan in plans},
                simulated_until=now,
            )
    except IntegrityError:
        raise SandboxExists(
            "sandbox_exists", f"Tenant {tenant.code} has a sandbox open: reset it or change its traffic."
        ) from None


def issue_sandbox_key(sandbox: Sandbox, package: str, name: str = "") -> IssuedKey:
    """A new API key of the sandbox for one of its packages (its records are the sandbox's)."""
    if package not in {p.code for p in sandbox.contract.held_packages()}:
        raise SandboxError(
            "package_not_in_sandbox", f"The sandbox holds no package {package!r}.", {"package": package}
        )
    return _key(sandbox.contract, package, name or "sandbox")


def set_daily_events(sandbox: Sandbox, daily_events: int) -> Sandbox:
    """The simulator's events a day from now on (the same value again changes nothing)."""
    _check_daily(daily_events)
    Sandbox.objects.filter(pk=sandbox.pk).update(daily_events=daily_events)
    sandbox.daily_events = daily_events
    return sandbox


def reset_sandbox(sandbox: Sandbox) -> Sandbox:
    """Delete every record of the sandbox (its figures and previews start from zero); its packages,
    prices and keys stay. Repeating it is harmless."""
    delete_sandbox_records(sandbox.tenant.code, sandbox.contract.code)
    now = timezone.now()
    Sandbox.objects.filter(pk=sandbox.pk).update(reset_at=now, events_sent=0, simulated_until=now)
    sandbox.refresh_from_db()
    return sandbox


def _plans(principal: Principal, packages: Sequence[str]) -> list[PackagePlan]:
    codes = list(dict.fromkeys(packages))
    if not codes or len(codes) > MAX_PACKAGES:
        raise SandboxError(
            "invalid_packages", f"Name 1 to {MAX_PACKAGES} packages.", {"packages": list(packages)}
        )
    offered = {p.code: p for p in active_packages(principal)}
    plans = []
    for code in codes:
        package = offered.get(code)
        plan = next(iter(package.plans.all()), None) if package is not None else None
        if plan is None:
            raise SandboxError(
                "package_not_available", f"No package {code!r} with a plan on sale to you.", {"package": code}
            )
        plans.append(plan)
    return plans


def _bind_serving_agents(contract: Contract) -> None:
    """The agents bound to some contract of the tenant may report for its sandbox too (an agent bound to
    the whole tenant may already): the sandbox is served where the tenant is."""
    agents = AgentBinding.objects.filter(tenant=contract.tenant, contract__isnull=False)
    AgentBinding.objects.bulk_create(
        [
            AgentBinding(agent_id=agent, tenant=contract.tenant, contract=contract)
            for agent in sorted(set(agents.values_list("agent_id", flat=True)))
        ]
    )


def _key(contract: Contract, package: str, name: str) -> IssuedKey:
    return issue_api_key(contract_code=contract.code, sla_class="standard", name=name, package_code=package)


def _check_daily(daily_events: int) -> None:
    whole = isinstance(daily_events, int) and not isinstance(daily_events, bool)
    if not whole or not 0 <= daily_events <= MAX_DAILY_EVENTS:
        raise SandboxError(
            "invalid_daily_events",
            f"daily_events is a whole number from 0 to {MAX_DAILY_EVENTS}.",
            {"daily_events": daily_events},
        )
