from django.db import models

from accounts.models import Tenant
from accounts.validators import validate_slug_code
from contracts.models import Contract


class ApiKey(models.Model):
    """A customer's inference API key. Only its SHA-256 is stored; the key itself is shown once."""

    prefix = models.CharField(
        max_length=16, unique=True, help_text="The key's first characters, to recognise it."
    )
    key_hash = models.CharField(max_length=64, unique=True, help_text="Hex SHA-256 of the key.")
    name = models.CharField(max_length=200, blank=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="api_keys")
    contract = models.ForeignKey(Contract, on_delete=models.PROTECT, related_name="api_keys")
    sla_class = models.CharField(max_length=64, default="standard", validators=[validate_slug_code])
    quota_tokens = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Tokens (in + out) per calendar month (UTC); empty: no quota."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["prefix"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.contract.code})"
