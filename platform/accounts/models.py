from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models

from .validators import validate_slug_code


class Tenant(models.Model):
    """A customer organisation. `code` is what agents put in each record's `tenant` field."""

    code = models.CharField(max_length=64, unique=True, validators=[validate_slug_code])
    name = models.CharField(max_length=200)
    legal_name = models.CharField(max_length=200, blank=True, help_text="On invoices; the name when empty.")
    address = models.TextField(max_length=500, blank=True)
    tax_id = models.CharField(max_length=64, blank=True, help_text="Taxpayer identification number.")
    bank_name = models.CharField(max_length=200, blank=True, help_text="On invoices whose issuer needs it.")
    bank_account = models.CharField(max_length=64, blank=True, help_text="On invoices whose issuer needs it.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["code"]

    def __str__(self) -> str:
        return self.code


class Role(models.TextChoices):
    """What a member or an API token may do in its tenant. Everyone may read; writes depend on the role."""

    OWNER = "owner", "Owner"
    BILLING = "billing", "Billing"
    DEVELOPER = "developer", "Developer"
    READ_ONLY = "read_only", "Read-only"


class Membership(models.Model):
    """The tenant a customer user acts for, and in which role. Platform staff have none: they see all."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="membership")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="members")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.OWNER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant", "user"]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant.code} ({self.role})"


TOKEN_PREFIX = "tmt_"  # noqa: S105 - a public prefix, not a secret


def token_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_token_secret() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


class ApiToken(models.Model):
    """A program's credential for the REST API: one tenant, one role. Only its SHA-256 is stored."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_tokens")
    role = models.CharField(max_length=16, choices=Role.choices)
    name = models.CharField(max_length=200, blank=True)
    prefix = models.CharField(max_length=16, unique=True, help_text="The first characters, shown in lists.")
    digest = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="api_tokens_created"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.prefix}… {self.tenant.code} ({self.role})"
