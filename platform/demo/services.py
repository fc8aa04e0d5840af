"""Seed the demo tenant, package, contract and agent (idempotent)."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from django.contrib.auth import get_user_model

from accounts.models import Tenant
from agents.services import register_agent
from catalog.models import ComputePackage
from contracts.dimensions import Dimension
from contracts.models import Contract, ContractPrice
from treemeter_records import private_key_from_seed, public_key_to_b64

DEMO_PRICES = {
    Dimension.REQUESTS: Decimal("0.05"),
    Dimension.TOKENS_IN: Decimal("0.00002"),
    Dimension.TOKENS_OUT: Decimal("0.00006"),
    Dimension.EXPERT_TOKENS: Decimal("0.000001"),
    Dimension.L3_SECONDS: Decimal("0.80"),
}


@dataclass(frozen=True)
class DemoSetup:
    tenant: Tenant
    package: ComputePackage
    contract: Contract
    agent_id: str
    agent_seed: bytes


def seed_demo(data_dir: Path) -> DemoSetup:
    tenant, _ = Tenant.objects.get_or_create(code="acme-legal", defaults={"name": "Acme Legal 律所"})
    package, _ = ComputePackage.objects.get_or_create(
        code="contract-review", defaults={"name": "Contract review 合同审查", "unit": "request"}
    )
    contract, _ = Contract.objects.get_or_create(
        code="acme-legal-review-2026",
        defaults={
            "tenant": tenant,
            "package": package,
            "currency": "CNY",
            "starts_at": datetime(2026, 1, 1, tzinfo=UTC),
        },
    )
    for dimension, price in DEMO_PRICES.items():
        ContractPrice.objects.get_or_create(
            contract=contract, dimension=dimension, defaults={"unit_price": price}
        )
    seed = _read_or_create_seed(data_dir / "demo-agent-key")
    agent_id = "agent-demo-1"
    register_agent(
        agent_id=agent_id,
        public_key_b64=public_key_to_b64(private_key_from_seed(seed)),
        tenant_codes=[tenant.code],
        contract_codes=[contract.code],
        host_class="cpu-demo",
    )
    return DemoSetup(tenant, package, contract, agent_id, seed)


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


def _read_or_create_seed(path: Path) -> bytes:
    if not path.exists():
        path.write_bytes(os.urandom(32))
        path.chmod(0o600)
    return path.read_bytes()
