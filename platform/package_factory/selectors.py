"""Reads: a tenant's package builds and the ONNX files its capabilities use."""

from __future__ import annotations

from django.db.models import QuerySet

from accounts.access import Principal
from catalog.models import OnnxArtifact

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
