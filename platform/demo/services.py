"""Seed the demo tenants, packages, contracts, customer API keys and the serving tree's agents: one
L1 router and four executors (idempotent; demo.tree says which subtree each serves)."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from django.contrib.auth import get_user_model

from accounts.models import Tenant
from agents.models import Agent
from agents.services import register_agent
from catalog.models import ComputePackage
from contracts.models import Contract, ContractPrice
from entitlements.services import issue_api_key
from pricing.dimensions import Dimension
from treemeter_records import private_key_from_seed, public_key_to_b64

ROUTER_ID = "demo-router"
EXECUTOR_IDS = ("demo-exec-a", "demo-exec-b", "demo-exec-c", "demo-exec-d")
HOST_CLASS = "cpu-demo"  # the host class of the demo's agents, priced by the demo's host cost profile


@dataclass(frozen=True)
class DemoContract:
    tenant: str
    tenant_name: str
    package: str
    package_name: str
    code: str
    currency: str
    prices: dict[str, Decimal]
    sla_classes: tuple[str, ...]


DEMO_CONTRACTS = (
    DemoContract(
        "acme-legal", "Acme Legal 律所", "contract-review", "Contract review 合同审查",
        "acme-legal-review-2026", "CNY",
        {
            Dimension.REQUESTS: Decimal("0.05"),
            Dimension.TOKENS_IN: Decimal("0.00002"),
            Dimension.TOKENS_OUT: Decimal("0.00006"),
            Dimension.EXPERT_TOKENS: Decimal("0.000001"),
            Dimension.L3_SECONDS: Decimal("0.80"),
        },
        ("gold", "standard"),
    ),
    DemoContract(
        "st-mary", "St Mary Hospital", "patient-matching", "Patient matching",
        "st-mary-matching-2026", "USD",
        {
            Dimension.REQUESTS: Decimal("0.01"),
            Dimension.TOKENS_OUT: Decimal("0.00004"),
            Dimension.L2_MISSES: Decimal("0.0001"),
        },
        ("gold",),
    ),
    DemoContract(
        "nova-research", "Nova Research", "batch-summaries", "Batch summaries",
        "nova-batch-2026", "EUR",
        {Dimension.TOKENS_IN: Decimal("0.00001"), Dimension.TOKENS_OUT: Decimal("0.00003")},
        ("batch",),
    ),
)  # fmt: skip


@dataclass(frozen=True)
class DemoKey:
    contract: Contract
    sla_class: str
    secret: str


@dataclass(frozen=True)
class DemoSetup:
    contracts: list[Contract]
    keys: list[DemoKey]
    seeds: dict[str, bytes]  # agent id → private key seed: the router and the executors
    data_dir: Path

    @property
    def contract(self) -> Contract:
        """The first demo contract (acme-legal), which bench/ingest.py loads with synthetic records."""
        return self.contracts[0]

    @property
    def tenant(self) -> Tenant:
        return self.contract.tenant

    @property
    def package(self) -> ComputePackage:
        return self.contract.package


def seed_demo(data_dir: Path) -> DemoSetup:
    """Tenants, packages, contracts and prices; a fresh API key per SLA class; the tree's agents."""
    contracts = []
    keys = []
    for spec in DEMO_CONTRACTS:
        tenant, _ = Tenant.objects.get_or_create(code=spec.tenant, defaults={"name": spec.tenant_name})
        package, _ = ComputePackage.objects.get_or_create(
            code=spec.package, defaults={"name": spec.package_name, "unit": "request"}
        )
        contract, _ = Contract.objects.get_or_create(
            code=spec.code,
            defaults={
                "tenant": tenant,
                "package": package,
                "currency": spec.currency,
                "starts_at": datetime(2026, 1, 1, tzinfo=UTC),
            },
        )
        for dimension, price in spec.prices.items():
            ContractPrice.objects.get_or_create(
                contract=contract, dimension=dimension, defaults={"unit_price": price}
            )
        contracts.append(contract)
        for sla_class in spec.sla_classes:
            issued = issue_api_key(contract_code=contract.code, sla_class=sla_class, name="demo")
            keys.append(DemoKey(contract, sla_class, issued.secret))
    seeds = {}
    for agent_id in (ROUTER_ID, *EXECUTOR_IDS):
        seeds[agent_id] = read_or_create_seed(data_dir / f"{agent_id}-key")
        register_agent(
            agent_id=agent_id,
            public_key_b64=public_key_to_b64(private_key_from_seed(seeds[agent_id])),
            tenant_codes=[],
            contract_codes=[c.code for c in contracts],
            host_class=HOST_CLASS,
            kind=Agent.Kind.ROUTER if agent_id == ROUTER_ID else Agent.Kind.EXECUTOR,
        )
    return DemoSetup(contracts, keys, seeds, data_dir)


def ensure_admin(data_dir: Path) -> tuple[str, str]:
    """A superuser for the admin; its password is created once and kept in the data dir."""
    password_file = data_dir / "admin-password"
    if not password_file.exists():
        password_file.write_text(secrets.token_urlsafe(12))
        password_file.chmod(0o600)
    password = password_file.read_text().strip()
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(
        username="admin", defaults={"is_staff": True, "is_superuser": True}
    )
    if created:
        user.set_password(password)
        user.save()
    return "admin", password


def read_or_create_seed(path: Path) -> bytes:
    """An agent's private key seed, made once and kept in the data dir."""
    if not path.exists():
        path.write_bytes(os.urandom(32))
        path.chmod(0o600)
    return path.read_bytes()
