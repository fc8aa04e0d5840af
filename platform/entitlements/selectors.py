"""Reads for entitlements: a tenant's API keys, and the snapshot an agent serves from."""

from __future__ import annotations

import time
from typing import Any

from django.db.models import QuerySet

from accounts.access import Principal, scoped
from agents.models import AgentKey
from agents.selectors import agent_scope, model_keys_in_force
from catalog.models import ComputePackage, PackageCapability
from contracts.models import Contract
from releases.selectors import ReleaseInForce, releases_in_force
from treemeter_records.protocol import SNAPSHOT_VERSION

from .models import ApiKey

SNAPSHOT_REFRESH_SECONDS = 30


def _status(api_key: ApiKey) -> str:
    if api_key.revoked_at is not None:
        return "revoked"
    if api_key.contract.status != Contract.Status.ACTIVE:
        return "contract_inactive"
    return "active"


def visible_api_keys(principal: Principal) -> QuerySet[ApiKey]:
    """The API keys the principal sees."""
    return scoped(ApiKey.objects.select_related("tenant", "contract__package", "package"), principal)


def key_package(api_key: ApiKey) -> ComputePackage:
    """The package a key's requests are made under: its own, else its contract's."""
    return api_key.package if api_key.package is not None else api_key.contract.package


def package_models() -> dict[int, list[str]]:
    """Package id → the model ids its capabilities are served by: all a key of the package may reach
    (a package without capabilities is unrestricted: absent here)."""
    models: dict[int, list[str]] = {}
    pairs = (
        PackageCapability.objects.values_list("package_id", "capability__model_id")
        .order_by("package_id", "capability__model_id")
        .distinct()
    )
    for package_id, model_id in pairs:
        models.setdefault(package_id, []).append(model_id)
    return models


def _release(releases: dict[tuple[int, int], ReleaseInForce], api_key: ApiKey) -> dict[str, Any]:
    """The key's `release` entry, only when a gray release is in force for its contract package."""
    release = releases.get((api_key.contract_id, key_package(api_key).pk))
    return {} if release is None else {"release": release.as_json()}


def entitlement_snapshot(agent_key: AgentKey) -> dict[str, Any]:
    """Every API key of the contracts this agent may report for (and only those), with its binding and
    the gray release in force for its package (`release`: the capabilities on and this agent's share of
    their hourly caps; absent without one); and the model publisher keys in force, whose signature an agent
    needs on a checkpoint's manifest."""
    scope = agent_scope(agent_key.agent_id)
    keys = [
        k
        for k in ApiKey.objects.select_related("tenant", "contract__package", "package").filter(
            tenant__code__in=list(scope.tenants)
        )
        if scope.allows(k.tenant.code, k.contract.code)
    ]
    models = package_models()
    releases = releases_in_force(agent_key.agent.agent_id, {k.contract_id for k in keys})
    now = time.time_ns()
    return {
        "v": SNAPSHOT_VERSION,
        "agent_id": agent_key.agent.agent_id,
        "issued_ns": now,
        "refresh_s": SNAPSHOT_REFRESH_SECONDS,
        "keys": [
            {
                "key_hash": k.key_hash,
                "prefix": k.prefix,
                "tenant": k.tenant.code,
                "contract": k.contract.code,
                "package": key_package(k).code,
                "models": models.get(key_package(k).pk, []),
                "sla_class": k.sla_class,
                "quota_tokens": k.quota_tokens,
                "quota_period": "month",
                "status": _status(k),
                **_release(releases, k),
            }
            for k in keys
        ],
        "model_keys": [
            {"model_id": m.model_id, "key_id": m.key_id, "public_key": m.public_key}
            for m in model_keys_in_force()
        ],
    }
