"""Reads for the catalogue: active packages with their purchasable plans and price templates."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from .models import ComputePackage, PackagePlan


def active_packages() -> QuerySet[ComputePackage]:
    plans = PackagePlan.objects.filter(active=True).prefetch_related("prices").order_by("code")
    return ComputePackage.objects.filter(active=True).prefetch_related(Prefetch("plans", queryset=plans))


def purchasable_plan(package_code: str, plan_code: str) -> PackagePlan | None:
    """The active plan of an active package, or None."""
    return (
        PackagePlan.objects.select_related("package")
        .prefetch_related("prices")
        .filter(package__code=package_code, package__active=True, code=plan_code, active=True)
        .first()
    )
