"""A tenant with a production contract and two packages on sale that it can open a sandbox on: the
composed supplier and logistics packages of the business-event tests, each with a plan."""

from __future__ import annotations

from decimal import Decimal

from catalog.models import ComputePackage, PackagePlan, PlanPrice
from contracts.models import Contract
from tests.billing.composed import composed_contract


def on_sale(package: ComputePackage, base_fee: str, requests: str) -> PackagePlan:
    plan = PackagePlan.objects.create(
        package=package, code="standard", name="Standard", currency="CNY", base_fee=Decimal(base_fee)
    )
    PlanPrice.objects.create(plan=plan, dimension="requests", unit_price=Decimal(requests))
    return plan


def production_with_packages() -> Contract:
    """acme-2026 (supplier + logistics, production) and both packages on sale: supplier 100.00 a month
    and 0.50 a request, logistics 40.00 and 0.20."""
    contract = composed_contract()
    on_sale(contract.package, "100.00", "0.50")
    on_sale(ComputePackage.objects.get(code="logistics"), "40.00", "0.20")
    return contract
