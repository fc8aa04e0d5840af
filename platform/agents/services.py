"""Writes to the agent registry."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from accounts.models import Tenant
from common.errors import ApiError
from contracts.models import Contract
from metrics.instruments import MANIFEST_REFUSALS
from treemeter_records import key_id_for

from .models import Agent, AgentBinding, AgentKey, ManifestRefusal, ModelPublisherKey


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


def register_model_key(*, model_id: str, public_key_b64: str) -> tuple[ModelPublisherKey, bool]:
    """Register a model publisher's public key for ``model_id``: agents then load that model's checkpoints
    whose manifest it signed. Returns the key and whether it is new.

    Idempotent: the same key for the same model again changes nothing (a revoked one stays revoked)."""
    raw = decode_public_key(public_key_b64)
    key, created = ModelPublisherKey.objects.get_or_create(
        model_id=model_id, key_id=key_id_for(raw), defaults={"public_key": public_key_b64}
    )
    return key, created


def record_manifest_refusal(
    *, agent: Agent, model_id: str, reason: str, key_id: str, manifest_sha3: str, refused_at: datetime
) -> tuple[ManifestRefusal, bool]:
    """Store an agent's report of a refused manifest and count it; returns it and whether it is new.

    A retry of the same report (same agent, manifest and time) stores and counts nothing more."""
    refusal, created = ManifestRefusal.objects.get_or_create(
        agent=agent,
        manifest_sha3=manifest_sha3,
        refused_at=refused_at,
        defaults={"model_id": model_id, "reason": reason, "key_id": key_id},
    )
    if created:
        MANIFEST_REFUSALS.labels(reason).inc()
    return refusal, created
