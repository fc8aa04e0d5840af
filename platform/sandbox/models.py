"""A tenant's sandbox: a contract of its own (`Contract.sandbox`), whose records are stored apart and
never reach a production figure, and the traffic its simulator sends each day."""

from __future__ import annotations

from django.core.validators import MaxValueValidator
from django.db import models

from accounts.models import Tenant
from contracts.models import Contract

MAX_DAILY_EVENTS = 100_000


class Sandbox(models.Model):
    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="sandbox")
    contract = models.OneToOneField(Contract, on_delete=models.PROTECT, related_name="sandbox_of")
    daily_events = models.PositiveIntegerField(
        default=1000,
        validators=[MaxValueValidator(MAX_DAILY_EVENTS)],
        help_text="Events a day the simulator sends through the serving path (0: none).",
    )
    # The simulator's keys, one per package (package code → secret). Sandbox keys reach only the
    # sandbox contract, whose records are never billed; the simulator needs them in clear to call.
    simulator_keys = models.JSONField(default=dict, editable=False)
    plans = models.JSONField(
        default=dict, editable=False, help_text="Package code → the plan its prices are from."
    )
    simulated_until = models.DateTimeField(help_text="The traffic due up to then has been sent.")
    events_sent = models.PositiveBigIntegerField(default=0, editable=False)
    reset_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "sandboxes"

    def __str__(self) -> str:
        return f"{self.tenant.code}: {self.contract.code}"
