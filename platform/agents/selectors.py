"""Reads from the agent registry."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import QuerySet

from .models import AgentBinding, AgentKey, ManifestRefusal, ModelPublisherKey


@dataclass(frozen=True)
class Scope:
    """The tenants an agent may report for; per tenant, None (all contracts) or the allowed contract codes."""

    tenants: dict[str, frozenset[str] | None]

    def allows(self, tenant: str, contract: str) -> bool:
        if tenant not in self.tenants:
            return False
        contracts = self.tenants[tenant]
        return contracts is None or contract in contracts


def key_with_agent(key_id: str) -> AgentKey | None:
    return AgentKey.objects.select_related("agent").filter(key_id=key_id).first()


def agent_scope(agent_pk: int) -> Scope:
    tenants: dict[str, set[str] | None] = {}
    for tenant_code, contract_code in AgentBinding.objects.filter(agent_id=agent_pk).values_list(
        "tenant__code", "contract__code"
    ):
        if contract_code is None:
            tenants[tenant_code] = None
        elif tenants.get(tenant_code, set()) is not None:
            tenants.setdefault(tenant_code, set()).add(contract_code)  # type: ignore[union-attr]
    return Scope({t: (None if c is None else frozenset(c)) for t, c in tenants.items()})


def model_keys_in_force() -> list[ModelPublisherKey]:
    """The publisher keys agents accept, every model's, revoked ones left out."""
    return list(ModelPublisherKey.objects.filter(revoked_at__isnull=True).order_by("model_id", "key_id"))


def manifest_refusals() -> QuerySet[ManifestRefusal]:
    """The checkpoint manifests agents refused, newest first."""
    return ManifestRefusal.objects.select_related("agent")
