"""Writes to the agent registry."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone

from accounts.models import Tenant
from common.errors import ApiError
from contracts.models import Contract
from treemeter_records import key_id_for

from .models import Agent, AgentBinding, AgentKey


class AgentRegistrationError(ApiError, ValueError):
    http_status = 400


def decode_public_key(public_key_b64: str) -> bytes:
    try:
        raw = base64.b64decode(public_key_b64, validate=True)
    except (binascii.Error, ValueError):
        raise AgentRegistrationError("invalid_public_key", "public_key must be base64.") from None
    if len(raw) != 32:
        raise AgentRegistrationError("invalid_public_key", "public_key must be a raw 32-byte Ed25519 key.")
    return raw


@transaction.atomic
def register_agent(
    *,
    agent_id: str,
    public_key_b64: str,
    tenant_codes: Iterable[str],
    contract_codes: Iterable[str] = (),
    name: str = "",
    host_class: str = "",
    kind: str = Agent.Kind.EXECUTOR,
) -> AgentKey:
    """Create the agent (an executor or an L1 router) if new, add the key, and bind it to tenants
    (and optionally contracts).

    Idempotent: registering the same agent and key again changes nothing and returns the same key. An
    agent keeps its kind: registering it again as the other kind is refused (``kind_mismatch``).
    """
    if kind not in Agent.Kind.values:
        raise AgentRegistrationError("unknown_kind", f"An agent is one of: {', '.join(Agent.Kind.values)}.")
    raw = decode_public_key(public_key_b64)
    key_id = key_id_for(raw)
    tenants = list(Tenant.objects.filter(code__in=list(tenant_codes)))
    contracts = list(Contract.objects.filter(code__in=list(contract_codes)).select_related("tenant"))
    missing = set(contract_codes) - {c.code for c in contracts}
    if missing:
        raise AgentRegistrationError(
            "unknown_contract", f"Unknown contract(s): {', '.join(sorted(missing))}."
        )
    missing = set(tenant_codes) - {t.code for t in tenants}
    if missing:
        raise AgentRegistrationError("unknown_tenant", f"Unknown tenant(s): {', '.join(sorted(missing))}.")
    for contract in contracts:
        if contract.tenant not in tenants:
            tenants.append(contract.tenant)

    agent, _ = Agent.objects.get_or_create(
        agent_id=agent_id, defaults={"name": name or agent_id, "host_class": host_class, "kind": kind}
    )
    if agent.kind != kind:
        raise AgentRegistrationError("kind_mismatch", f"Agent {agent_id} is registered as a {agent.kind}.")
    existing = AgentKey.objects.filter(key_id=key_id).first()
    if existing is not None and existing.agent_id != agent.pk:
        raise AgentRegistrationError("key_in_use", "This public key is registered to another agent.")
    key = existing or AgentKey.objects.create(agent=agent, key_id=key_id, public_key=public_key_b64)
    bound_contract_tenants = {c.tenant_id for c in contracts}
    for tenant in tenants:
        if tenant.pk not in bound_contract_tenants:
            AgentBinding.objects.get_or_create(agent=agent, tenant=tenant, contract=None)
    for contract in contracts:
        AgentBinding.objects.get_or_create(agent=agent, tenant=contract.tenant, contract=contract)
    return key


def revoke_key(key_id: str) -> AgentKey:
    """Revoke a key: batches signed with it are refused from now on. Revoking twice keeps the first time."""
    key = AgentKey.objects.get(key_id=key_id)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key
