"""A capability gray release: a contract's package reaches its customer stage by stage. Each stage names
the capabilities that are on and their hourly call caps (enforced by the agents, from the entitlement
snapshot), the quality gate its records must pass, whether its usage is billed, and whether it is
promoted by hand or automatically once the gate holds."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from accounts.validators import validate_slug_code
from catalog.models import Capability, ComputePackage
from contracts.models import Contract


class ReleasePlan(models.Model):
    """The ordered stages one package of a contract goes through; its keys of that package follow the
    stage in force (the current one) until the last stage is promoted and the plan is complete."""

    class Status(models.TextChoices):
        ACTIVE = "active", "Active (a stage is in force)"
        COMPLETED = "completed", "Completed (the package is fully released)"

    code = models.CharField(max_length=64, unique=True, validators=[validate_slug_code])
    name = models.CharField(max_length=200)
    contract = models.ForeignKey(Contract, on_delete=models.PROTECT, related_name="release_plans")
    package = models.ForeignKey(ComputePackage, on_delete=models.PROTECT, related_name="release_plans")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["contract", "package"],
                condition=models.Q(status="active"),
                name="one_active_release_per_contract_package",
            ),
        ]

    def __str__(self) -> str:
        return self.code


class ReleaseStage(models.Model):
    """One stage of a plan. Its gate: every gated capability reached `gate_min_calls` calls since the
    gate's window opened (`window_started_at`: the stage's start, or its last hold) and at least
    `gate_min_acceptance` of them were accepted by the capability's acceptance rule."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending (an earlier stage is in force)"
        ACTIVE = "active", "Active"
        HELD = "held", "Held (its gate failed)"
        PASSED = "passed", "Passed (promoted)"

    class Promotion(models.TextChoices):
        MANUAL = "manual", "Manual (the customer or staff promote it)"
        AUTOMATIC = "automatic", "Automatic (once the gate holds)"

    plan = models.ForeignKey(ReleasePlan, on_delete=models.CASCADE, related_name="stages")
    position = models.PositiveSmallIntegerField(help_text="1 for the first stage.")
    name = models.CharField(max_length=200)
    billing_on = models.BooleanField(
        default=False, help_text="Off: its usage is metered at zero price (gray usage on the invoice)."
    )
    promotion = models.CharField(max_length=16, choices=Promotion.choices, default=Promotion.MANUAL)
    gate_min_acceptance = models.DecimalField(
        max_digits=5,
        decimal_places=4,
        default=Decimal(0),
        validators=[MinValueValidator(0), MaxValueValidator(1)],
        help_text="Share of a gated capability's calls its rule must accept (0.9: 90 %).",
    )
    gate_min_calls = models.PositiveIntegerField(
        default=0, help_text="Calls each gated capability needs before the gate is judged."
    )
    duration_hours = models.PositiveIntegerField(
        null=True, blank=True, help_text="When it is up and the gate does not hold, the stage is held."
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    started_at = models.DateTimeField(null=True, blank=True)
    window_started_at = models.DateTimeField(
        null=True, blank=True, help_text="Since when the gate is judged: the start, or the last hold."
    )
    ended_at = models.DateTimeField(null=True, blank=True)
    holds = models.PositiveIntegerField(default=0, help_text="How many times its gate failed.")

    class Meta:
        ordering = ["plan", "position"]
        constraints = [
            models.UniqueConstraint(fields=["plan", "position"], name="one_release_stage_per_position"),
            models.CheckConstraint(
                condition=models.Q(gate_min_acceptance__gte=0, gate_min_acceptance__lte=1),
                name="release_gate_share_between_0_and_1",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.plan.code} #{self.position} {self.name}"


class StageCapability(models.Model):
    """A capability that is on in a stage, its hourly call cap (per contract package and UTC hour, all
    agents together; empty: none), and whether the stage's gate judges it."""

    stage = models.ForeignKey(ReleaseStage, on_delete=models.CASCADE, related_name="capabilities")
    capability = models.ForeignKey(Capability, on_delete=models.PROTECT, related_name="release_stages")
    hourly_cap = models.PositiveIntegerField(null=True, blank=True)
    gated = models.BooleanField(default=True)

    class Meta:
        ordering = ["stage", "capability__code"]
        verbose_name_plural = "stage capabilities"
        constraints = [
            models.UniqueConstraint(fields=["stage", "capability"], name="one_capability_per_release_stage"),
        ]

    def __str__(self) -> str:
        return f"{self.stage} {self.capability.code}"


class StageNote(models.Model):
    """A note staff write on a stage (what was seen, what was fixed); the stage's report shows them."""

    stage = models.ForeignKey(ReleaseStage, on_delete=models.CASCADE, related_name="notes")
    text = models.TextField()
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["stage", "created_at", "id"]

    def __str__(self) -> str:
        return f"{self.stage}: {self.text[:40]}"


class GateEvaluation(models.Model):
    """What one judgement of a stage's gate found (the API, the task and the report show the latest)."""

    class Verdict(models.TextChoices):
        PENDING = "pending", "Not enough calls yet"
        PASSED = "passed", "Holds"
        FAILED = "failed", "Fails"

    stage = models.ForeignKey(ReleaseStage, on_delete=models.CASCADE, related_name="evaluations")
    verdict = models.CharField(max_length=16, choices=Verdict.choices)
    figures = models.JSONField(help_text="Per gated capability: calls, accepted, acceptance, the rule.")
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    evaluated_at = models.DateTimeField()

    class Meta:
        ordering = ["stage", "-evaluated_at", "-id"]

    def __str__(self) -> str:
        return f"{self.stage}: {self.verdict}"
