"""factory_boy factories for the control plane, and a signing agent for ingest tests."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import factory
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from accounts.access import Principal
from accounts.models import Membership, Role, Tenant
from accounts.services import issue_api_token
from agents.models import AgentKey
from agents.services import register_agent
from catalog.models import ComputePackage
from contracts.models import Contract, ContractPrice
from treemeter_records import (
    SignedBatch,
    build_batch,
    canonical_bytes,
    make_record,
    new_record_id,
    private_key_from_seed,
    public_key_to_b64,
)
from treemeter_records.receipts import make_receipt


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant

    code = factory.Sequence(lambda n: f"tenant-{n}")
    name = factory.LazyAttribute(lambda o: f"Tenant {o.code}")


class ComputePackageFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ComputePackage

    code = factory.Sequence(lambda n: f"package-{n}")
    name = factory.LazyAttribute(lambda o: f"Package {o.code}")


class ContractFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Contract

    code = factory.Sequence(lambda n: f"contract-{n}")
    tenant = factory.SubFactory(TenantFactory)
    package = factory.SubFactory(ComputePackageFactory)
    currency = "CNY"
    starts_at = datetime(2026, 1, 1, tzinfo=UTC)


class ContractPriceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ContractPrice

    contract = factory.SubFactory(ContractFactory)
    dimension = "requests"
    unit_price = Decimal("0.05")


@dataclass
class SigningAgent:
    """A registered agent with its private key; builds signed batches of valid records."""

    agent_id: str
    key: Ed25519PrivateKey
    key_row: AgentKey
    next_seq: int = 0

    def receipt(self, record: dict[str, Any]) -> str:
        """The receipt this agent hands out with the answer it metered as ``record``."""
        return make_receipt(self.key, record, canonical_bytes(record))

    def record(self, contract: Contract, **overrides: Any) -> dict[str, Any]:
        seq = overrides.pop("seq", None)
        if seq is None:
            seq, self.next_seq = self.next_seq, self.next_seq + 1
        start_ns = overrides.pop("start_ns", int(datetime(2026, 11, 15, tzinfo=UTC).timestamp()) * 10**9)
        fields: dict[str, Any] = {
            "record_id": new_record_id(),
            "agent_id": self.agent_id,
            "seq": seq,
            "tenant": contract.tenant.code,
            "contract": contract.code,
            "package": contract.package.code,
            "client_request_id": f"req-{seq}",
            "model_id": "tiny-qwen3-moe",
            "weights_sha3": "ab" * 32,
            "start_ns": start_ns,
            "end_ns": start_ns + 150_000_000,
            "clock_drift_us": 3,
            "tokens_in": 100,
            "tokens_out": 20,
            "sla_class": "standard",
            "hops": [
                {"layer": "L1", "node": "router-1", "latency_us": 400},
                {"layer": "L2", "node": "cache-1", "latency_us": 2_000},
                {"layer": "L3", "node": "gpu-1", "latency_us": 90_000},
                {"layer": "L2", "node": "cache-1", "latency_us": 1_000},
                {"layer": "L1", "node": "router-1", "latency_us": 100},
            ],
            "experts": [
                {"layer": 0, "expert": 1, "tokens": 150},
                {"layer": 0, "expert": 4, "tokens": 88},
                {"layer": 1, "expert": 2, "tokens": 238},
            ],
            "prefix_cache_hit_tokens": 10,
            "expert_cache_hits": 2,
            "expert_cache_misses": 1,
            "status": "ok",
            "outcome": None,
        }
        fields.update(overrides)
        return make_record(**fields)

    def batch(self, records: list[dict[str, Any]]) -> SignedBatch:
        return build_batch(records, self.agent_id, self.key)


def signing_agent(*contracts: Contract, agent_id: str = "agent-1", kind: str = "executor") -> SigningAgent:
    """Register an agent (an executor, or an L1 router) bound to the given contracts (and so to their
    tenants)."""
    key = private_key_from_seed(os.urandom(32))
    key_row = register_agent(
        agent_id=agent_id,
        public_key_b64=public_key_to_b64(key),
        tenant_codes=[],
        contract_codes=[c.code for c in contracts],
        kind=kind,
    )
    return SigningAgent(agent_id=agent_id, key=key, key_row=key_row)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "auth.User"
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.PostGenerationMethodCall("set_password", "pw-12345")

    @factory.post_generation
    def _save(user: Any, create: bool, extracted: object, **kwargs: object) -> None:
        if create:
            user.save()


class MembershipFactory(factory.django.DjangoModelFactory):
    """A customer user of a tenant in a role (owner by default)."""

    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    tenant = factory.SubFactory(TenantFactory)
    role = Role.OWNER


def api_token_for(tenant: Tenant, role: str = Role.OWNER) -> str:
    """A fresh API token's secret for `tenant` in `role` (made by an owner member of that tenant)."""
    owner = MembershipFactory.create(tenant=tenant, role=Role.OWNER)
    principal = Principal(tenant=tenant, role=Role.OWNER, user_id=owner.user_id)
    return issue_api_token(principal, role=role, name=f"{role} token").secret


def customer(tenant_code: str, user_id: int | None = None, role: str = Role.OWNER) -> Principal:
    """The principal of a customer of the tenant with this code (what a member's request acts as)."""
    return Principal(tenant=Tenant.objects.get(code=tenant_code), role=role, user_id=user_id)
