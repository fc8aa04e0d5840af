"""The demo's composed package billed by business event: Acme Legal's contract also holds "contract review
events", one capability on the serving tree's model, accepted when its answer has at least MIN_TOKENS
tokens, and priced per `contract_review_event` (billing.business_events)."""

from __future__ import annotations

from decimal import Decimal

from catalog.models import Capability, ComputePackage, PackageCapability, PackagePlan, PlanPrice
from contracts.models import Contract, ContractPackage, ContractPrice
from entitlements.services import issue_api_key

EVENT_PACKAGE = "contract-review-events"
EVENT_UNIT = "contract_review_event"
EVENT_PRICE = Decimal("12.50")
MIN_TOKENS = 6


def seed_event_package(contract: Contract, model_id: str) -> str:
    """The package, held by the contract and priced per event (once); a fresh API key for it."""
    capability, _ = Capability.objects.get_or_create(
        code="clause-review",
        defaults={
            "name": "Clause review",
            "engine": Capability.Engine.MOE,
            "model_id": model_id,
            "sla_timeout_ms": 30_000,
            "acceptance_rule": f"tokens_out >= {MIN_TOKENS}",
        },
    )
    package, _ = ComputePackage.objects.get_or_create(
        code=EVENT_PACKAGE, defaults={"name": "Contract review events 合同审查事件", "unit": EVENT_UNIT}
    )
    PackageCapability.objects.get_or_create(package=package, capability=capability)
    plan, created = PackagePlan.objects.get_or_create(
        package=package,
        code="standard",
        defaults={"name": "Contract review events: standard", "currency": "CNY", "base_fee": Decimal(50)},
    )
    if created:  # on sale, so that a sandbox may hold it
        PlanPrice.objects.create(plan=plan, dimension="requests", unit_price=Decimal("0.05"))
    ContractPackage.objects.get_or_create(contract=contract, package=package)
    price = {"unit_price": EVENT_PRICE}
    ContractPrice.objects.get_or_create(contract=contract, dimension=EVENT_UNIT, defaults=price)
    return issue_api_key(
        contract_code=contract.code, sla_class="gold", name="demo events", package_code=EVENT_PACKAGE
    ).secret
