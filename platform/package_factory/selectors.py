"""Reads: a tenant's package builds and the ONNX files its capabilities use."""

from __future__ import annotations

from decimal import Decimal

from django.db.models import QuerySet

from accounts.access import Principal
from billing.costs import suggested_base_fee
from catalog.models import OnnxArtifact
from common.periods import month_bounds

from .models import PackageBuild


def package_builds(principal: Principal) -> QuerySet[PackageBuild]:
    builds = PackageBuild.objects.select_related("package", "capability", "tenant")
    return builds if principal.tenant is None else builds.filter(tenant=principal.tenant)


def artifact_of(principal: Principal, sha256: str) -> OnnxArtifact | None:
    """The file, if one of the principal's tenant's capabilities uses it (staff: any)."""
    artifacts = OnnxArtifact.objects.filter(sha256=sha256)
    if principal.tenant is not None:
        artifacts = artifacts.filter(capabilities__owner=principal.tenant)
    return artifacts.distinct().first()


def measured_base_fee(build: PackageBuild, month: str) -> Decimal:
    """The base fee the package's measured cost in `month` suggests (billing.costs.suggested_base_fee:
    its cost per contract that used it, × its margin factor), in the quote's currency; 0 without traffic.
    Beside the upload-time quote once the package serves, as the portal's build page shows it."""
    return suggested_base_fee(build.package, *month_bounds(month), currency=build.quote["currency"])
