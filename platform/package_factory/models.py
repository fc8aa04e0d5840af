from __future__ import annotations

from django.conf import settings
from django.db import models

from accounts.models import Tenant
from catalog.models import Capability, ComputePackage


class PackageBuild(models.Model):
    """What the factory made of one upload: the package it created, the declaration as merged over its
    template, the quote of its base fee, the deployment manifests, and how long the build took."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="package_builds")
    package = models.OneToOneField(ComputePackage, on_delete=models.CASCADE, related_name="build")
    capability = models.ForeignKey(Capability, on_delete=models.PROTECT, related_name="builds")
    template = models.CharField(max_length=64, blank=True, help_text="The industry template started from.")
    spec = models.JSONField(help_text="The declaration, merged over the template.")
    quote = models.JSONField(help_text="The base fee and every term it was computed from.")
    executor_config = models.JSONField()
    compose_service = models.TextField()
    kubernetes_manifest = models.TextField()
    build_seconds = models.DecimalField(
        max_digits=10, decimal_places=3, help_text="From the upload received to the package created."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.tenant.code}: {self.package.code}"
