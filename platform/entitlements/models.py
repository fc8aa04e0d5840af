import uuid

from django.db import models

from accounts.models import Tenant
from accounts.validators import validate_slug_code
from catalog.models import ComputePackage
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
    package = models.ForeignKey(
        ComputePackage,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="api_keys",
        help_text="The contract's package its requests are made under; empty: the contract's own.",
    )
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


class QuotaPeriod(models.Model):
    """One API key's quota for one month: the row every lease grant and settlement locks (FOR UPDATE).

    remaining = quota − settled − outstanding, where a settled lease counts what it spent and an
    unsettled one (active or expired) counts all it was granted (or more, if it reported more).
    """

    api_key = models.ForeignKey(ApiKey, on_delete=models.PROTECT, related_name="quota_periods")
    period = models.CharField(max_length=7, help_text="YYYY-MM (UTC).")
    settled_tokens = models.PositiveBigIntegerField(default=0, help_text="Spent by settled leases.")
    outstanding_tokens = models.PositiveBigIntegerField(
        default=0, help_text="Held by unsettled leases (granted, or the spend reported if larger)."
    )
    exhausted_at = models.DateTimeField(null=True, blank=True, help_text="When nothing remained first.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["api_key", "period"], name="quota_period_once")]

    def __str__(self) -> str:
        return f"{self.api_key.prefix}… {self.period}"


class QuotaLease(models.Model):
    """A block of a key's period quota granted to one agent; the agent admits requests within it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    quota_period = models.ForeignKey(QuotaPeriod, on_delete=models.PROTECT, related_name="leases")
    agent = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, related_name="quota_leases")
    request_id = models.CharField(max_length=64, help_text="The agent's id for the grant (retries reuse it).")
    granted_tokens = models.PositiveBigIntegerField()
    spent_tokens = models.PositiveBigIntegerField(default=0, help_text="Cumulative, as last reported.")
    report_seq = models.PositiveBigIntegerField(default=0, help_text="Sequence of the last applied report.")
    granted_at = models.DateTimeField()
    expires_at = models.DateTimeField(help_text="A report before it renews it; after it: charged in full.")
    settled_at = models.DateTimeField(null=True, blank=True, help_text="The final report: the rest returned.")

    class Meta:
        ordering = ["granted_at"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "request_id"], name="quota_lease_request_once")
        ]

    def __str__(self) -> str:
        return f"lease {self.id} ({self.granted_tokens} tokens)"

    @property
    def charged_tokens(self) -> int:
        """What the lease takes from the quota: its spend once settled, else (conservatively) all of it."""
        if self.settled_at is not None:
            return self.spent_tokens
        return max(self.granted_tokens, self.spent_tokens)
