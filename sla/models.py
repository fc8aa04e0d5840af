"""SLA terms, measured reports, exclusions, service credits and burn-rate alerts."""

from __future__ import annotations

from datetime import date, timedelta
from zoneinfo import ZoneInfo, available_timezones

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from catalog.models import ComputePackage
from contracts.models import Contract


def validate_time_zone(name: str) -> None:
    if name not in available_timezones():
        raise ValidationError(f"{name!r} is not an IANA time zone (e.g. Asia/Shanghai).")


class SlaPolicy(models.Model):
    """The SLA terms of a compute package (the default) or of one contract (which then wins)."""

    name = models.CharField(max_length=200)
    package = models.OneToOneField(
        ComputePackage, null=True, blank=True, on_delete=models.CASCADE, related_name="sla_policy"
    )
    contract = models.OneToOneField(
        Contract, null=True, blank=True, on_delete=models.CASCADE, related_name="sla_policy"
    )
    time_zone = models.CharField(
        max_length=64,
        default="Asia/Shanghai",
        validators=[validate_time_zone],
        help_text="The SLA window is the calendar month in this zone.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "SLA policies"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(package__isnull=False, contract__isnull=True)
                | models.Q(package__isnull=True, contract__isnull=False),
                name="sla_policy_on_package_xor_contract",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if (self.package_id is None) == (self.contract_id is None):
            raise ValidationError("An SLA policy belongs to exactly one compute package or one contract.")


class Objective(models.Model):
    """One service level objective: ≥ target % of eligible requests are good over the window.

    availability: eligible = valid requests, good = status ok.
    latency: eligible = valid requests with status ok, good = the layer's latency ≤ threshold_ms.
    Layers: e2e (the record's start to end), l1/l2/l3 (its hops on that layer), queue (a queued job's
    wait in the router's queue, the decision's `queued_us` claim; 0 for an interactive request).
    With timeslice_minutes, the window is cut into slices; a slice is good when its ratio is ≥
    timeslice_target_percent (or it has no traffic), and the objective is met by good slices ÷ slices.
    """

    class Kind(models.TextChoices):
        AVAILABILITY = "availability", "Availability"
        LATENCY = "latency", "Latency"

    class Layer(models.TextChoices):
        END_TO_END = "e2e", "End to end"
        L1 = "l1", "L1 decision"
        L2 = "l2", "L2 preparation"
        L3 = "l3", "L3 compute"
        QUEUE = "queue", "Queue wait"

    policy = models.ForeignKey(SlaPolicy, on_delete=models.CASCADE, related_name="objectives")
    name = models.SlugField(max_length=64)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    layer = models.CharField(max_length=8, choices=Layer.choices, default=Layer.END_TO_END)
    threshold_ms = models.DecimalField(max_digits=12, decimal_places=3, null=True, blank=True)
    target_percent = models.DecimalField(max_digits=7, decimal_places=4)
    timeslice_minutes = models.PositiveIntegerField(null=True, blank=True)
    timeslice_target_percent = models.DecimalField(max_digits=7, decimal_places=4, null=True, blank=True)

    class Meta:
        ordering = ["policy", "id"]
        constraints = [
            models.UniqueConstraint(fields=["policy", "name"], name="sla_objective_name_per_policy"),
            models.CheckConstraint(
                condition=models.Q(target_percent__gt=0, target_percent__lt=100),
                name="sla_objective_target_between_0_and_100",
            ),
            models.CheckConstraint(
                condition=models.Q(kind="availability", threshold_ms__isnull=True, layer="e2e")
                | models.Q(kind="latency", threshold_ms__isnull=False, threshold_ms__gt=0),
                name="sla_objective_threshold_for_latency_only",
            ),
            models.CheckConstraint(
                condition=models.Q(timeslice_minutes__isnull=True, timeslice_target_percent__isnull=True)
                | models.Q(
                    timeslice_minutes__isnull=False,
                    timeslice_target_percent__isnull=False,
                    timeslice_minutes__gt=0,
                    timeslice_target_percent__gt=0,
                    timeslice_target_percent__lte=100,
                ),
                name="sla_objective_timeslice_complete",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.policy.name}: {self.name}"

    def clean(self) -> None:
        if not 0 < self.target_percent < 100:
            raise ValidationError(
                {"target_percent": "The target is a percentage strictly between 0 and 100."}
            )
        if self.kind == self.Kind.LATENCY and (self.threshold_ms is None or self.threshold_ms <= 0):
            raise ValidationError({"threshold_ms": "A latency objective needs a threshold in ms above 0."})
        if self.kind == self.Kind.AVAILABILITY and (self.threshold_ms is not None or self.layer != "e2e"):
            raise ValidationError("An availability objective is end to end and has no latency threshold.")
        if (self.timeslice_minutes is None) != (self.timeslice_target_percent is None):
            raise ValidationError("Timeslices need both the slice length and the slice target.")


class CreditStep(models.Model):
    """One rung of an objective's credit ladder: measured < below_percent → credit_percent of the fee."""

    objective = models.ForeignKey(Objective, on_delete=models.CASCADE, related_name="credit_steps")
    below_percent = models.DecimalField(max_digits=7, decimal_places=4)
    credit_percent = models.DecimalField(max_digits=7, decimal_places=4)

    class Meta:
        ordering = ["objective", "-below_percent"]
        constraints = [
            models.UniqueConstraint(fields=["objective", "below_percent"], name="sla_one_step_per_threshold"),
            models.CheckConstraint(
                condition=models.Q(below_percent__gt=0, below_percent__lte=100),
                name="sla_step_threshold_is_percent",
            ),
            models.CheckConstraint(
                condition=models.Q(credit_percent__gt=0, credit_percent__lte=100),
                name="sla_step_credit_is_percent",
            ),
        ]

    def __str__(self) -> str:
        return f"< {self.below_percent} % → {self.credit_percent} %"


class Exclusion(models.Model):
    """Requests in [starts_at, ends_at) that leave the SLA denominator, with the reason and who said so."""

    class Kind(models.TextChoices):
        MAINTENANCE = "maintenance", "Declared maintenance window"
        CUSTOMER_DEPENDENCY = "customer_dependency", "Incident in the customer's own dependency"
        CONTRACT_VIOLATION = "contract_violation", "Requests in violation of the contract"

    class Scope(models.TextChoices):
        ALL = "all", "Every request in the window"
        FAILED = "failed", "Only failed requests (error, timeout) in the window"

    contract = models.ForeignKey(Contract, on_delete=models.CASCADE, related_name="sla_exclusions")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.ALL)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(help_text="Exclusive.")
    reason = models.TextField()
    declared_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="+",
        null=True,
        blank=True,
        help_text="Empty: opened by the dependency watch (`detected_by`), not by a person.",
    )
    declared_at = models.DateTimeField(auto_now_add=True)
    detected_by = models.ForeignKey(
        "CustomerDependency",
        on_delete=models.PROTECT,
        related_name="outages",
        null=True,
        blank=True,
        help_text="The watched dependency whose outage opened it (it ends when that recovers).",
    )
    closed = models.BooleanField(
        default=True, help_text="False while a detected outage goes on: each failed check extends its window."
    )

    class Meta:
        ordering = ["contract", "starts_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(ends_at__gt=models.F("starts_at")), name="sla_exclusion_window_not_empty"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.contract.code} {self.kind} {self.starts_at:%Y-%m-%d %H:%M}"

    def clean(self) -> None:
        if self.starts_at and self.ends_at and self.ends_at <= self.starts_at:
            raise ValidationError("An exclusion window must end after it starts.")
        if not (self.reason or "").strip():
            raise ValidationError({"reason": "Say why the requests are excluded."})


class SlaReport(models.Model):
    """The measured SLA of one contract for one window, stored once computed (never recomputed on view)."""

    class Status(models.TextChoices):
        PROVISIONAL = "provisional", "Provisional (window still open)"
        FINAL = "final", "Final (window closed)"

    contract = models.ForeignKey(Contract, on_delete=models.PROTECT, related_name="sla_reports")
    month = models.CharField(max_length=7, help_text="YYYY-MM in the policy's time zone.")
    time_zone = models.CharField(max_length=64)
    period_start = models.DateTimeField()
    period_end = models.DateTimeField(help_text="Exclusive.")
    status = models.CharField(max_length=16, choices=Status.choices)
    record_count = models.BigIntegerField(help_text="Deduplicated records in the window, any status.")
    rejected_count = models.BigIntegerField(help_text="Requests refused as the customer's fault (4xx).")
    excluded_count = models.BigIntegerField(help_text="Valid requests removed by exclusions.")
    valid_count = models.BigIntegerField(help_text="The denominator of availability.")
    terms = models.JSONField(help_text="The policy and objectives the report was measured against.")
    objectives = models.JSONField(help_text="Per objective: measured, target, budget, spent, credit.")
    percentiles_ms = models.JSONField(help_text="Exact latency percentiles per layer, ms.")
    daily = models.JSONField(help_text="Per local day: valid and good counts per objective.")
    exclusions = models.JSONField(help_text="The exclusions applied, as declared.")
    credit_percent = models.DecimalField(max_digits=7, decimal_places=4)
    data_watermark = models.DateTimeField(null=True, help_text="Latest ingested_at among the records read.")
    ledger_checkpoint = models.CharField(
        max_length=128, blank=True, help_text="Filled once the ledger lands."
    )
    computed_at = models.DateTimeField()

    class Meta:
        ordering = ["-period_start", "contract"]
        constraints = [
            models.UniqueConstraint(fields=["contract", "month"], name="sla_one_report_per_contract_month"),
        ]

    def __str__(self) -> str:
        return f"{self.contract.code} {self.month}"

    @property
    def local_days(self) -> tuple[date, date]:
        """The window's first and last day in the report's time zone (the stored bounds are UTC instants
        and the end is exclusive): what "1 – 31 December (Asia/Shanghai)" means."""
        zone = ZoneInfo(self.time_zone)
        last = self.period_end - timedelta(microseconds=1)
        return self.period_start.astimezone(zone).date(), last.astimezone(zone).date()


class ServiceCredit(models.Model):
    """A credit earned under the SLA, for billing to put on the next invoice as a credit line."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending (not yet on an invoice)"
        APPLIED = "applied", "Applied by billing"

    contract = models.ForeignKey(Contract, on_delete=models.PROTECT, related_name="sla_credits")
    report = models.OneToOneField(SlaReport, on_delete=models.PROTECT, related_name="credit")
    month = models.CharField(max_length=7)
    credit_percent = models.DecimalField(max_digits=7, decimal_places=4)
    fee_basis = models.DecimalField(max_digits=20, decimal_places=2, help_text="The period's fee credited.")
    amount = models.DecimalField(max_digits=20, decimal_places=2)
    currency = models.CharField(max_length=3)
    description = models.CharField(max_length=200)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    invoice = models.ForeignKey(
        "billing.Invoice", null=True, blank=True, on_delete=models.PROTECT, related_name="service_credits"
    )
    invoice_line = models.OneToOneField(
        "billing.InvoiceLine",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="service_credit",
        help_text="The credit line; re-rating a draft replaces the line and links the new one.",
    )
    applied_at = models.DateTimeField(null=True, blank=True)
    held_reason = models.CharField(
        max_length=200, blank=True, help_text="Why the last invoice run left it pending (e.g. currency)."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-month", "contract"]
        constraints = [
            models.UniqueConstraint(fields=["contract", "month"], name="sla_one_credit_per_contract_month"),
            models.CheckConstraint(condition=models.Q(amount__gte=0), name="sla_credit_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.contract.code} {self.month}: {self.amount} {self.currency}"


class SlaAlert(models.Model):
    """An alert on a contract, open until its condition clears; at most one open per rule and subject.

    Burn-rate rules (`page-1h`, …) have the objective as subject; health signals (`route-jitter`,
    `expert-silent`) name what they are about (`e2e`, `layer 3 expert 17`).
    """

    class Severity(models.TextChoices):
        PAGE = "page", "Page"
        TICKET = "ticket", "Ticket"

    class Kind(models.TextChoices):
        BURN_RATE = "burn_rate", "Error budget burn rate"
        ROUTE_JITTER = "route_jitter", "Route jitter (P95 latency spread)"
        EXPERT_SILENT = "expert_silent", "Expert no longer routed to"

    contract = models.ForeignKey(Contract, on_delete=models.CASCADE, related_name="sla_alerts")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    rule = models.CharField(max_length=32)
    subject = models.CharField(max_length=64)
    objective = models.ForeignKey(
        Objective, null=True, blank=True, on_delete=models.CASCADE, related_name="alerts"
    )
    severity = models.CharField(max_length=8, choices=Severity.choices)
    fired_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    measured = models.JSONField(help_text="What fired it, e.g. the long and short burn rates.")
    last_evaluated_at = models.DateTimeField()

    class Meta:
        ordering = ["-fired_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["contract", "rule", "subject"],
                condition=models.Q(resolved_at__isnull=True),
                name="sla_one_open_alert_per_rule_subject",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.contract.code} {self.rule} {self.subject}"


class AlertEvent(models.Model):
    """An alert's state change, kept for the signed webhook delivery (the portal issue sends them)."""

    class Kind(models.TextChoices):
        FIRED = "fired", "Fired"
        RESOLVED = "resolved", "Resolved"

    alert = models.ForeignKey(SlaAlert, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    at = models.DateTimeField()
    payload = models.JSONField()

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.alert} {self.kind}"


class CustomerDependency(models.Model):
    """A system of the customer's that the contract's requests depend on (e.g. a hospital's HIS), watched
    by a health URL every minute (`sla.dependencies`). Five consecutive minutes of failure open a
    `customer_dependency` exclusion; the first healthy answer closes it."""

    contract = models.OneToOneField(Contract, on_delete=models.CASCADE, related_name="dependency")
    name = models.CharField(max_length=200)
    health_url = models.URLField(max_length=2000, help_text="GET; healthy if it answers 2xx or 3xx in time.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "customer dependencies"

    def __str__(self) -> str:
        return f"{self.contract.code} {self.name}"


class DependencyCheck(models.Model):
    """One probe of a customer dependency: when, whether it was healthy, and what it answered."""

    dependency = models.ForeignKey(CustomerDependency, on_delete=models.CASCADE, related_name="checks")
    checked_at = models.DateTimeField()
    healthy = models.BooleanField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["dependency", "checked_at", "id"]
        indexes = [models.Index(fields=["dependency", "checked_at"], name="sla_depcheck_dep_at")]

    def __str__(self) -> str:
        return f"{self.dependency} {self.checked_at:%Y-%m-%d %H:%M} {'ok' if self.healthy else 'failed'}"


class ExclusionAppeal(models.Model):
    """A customer contests an exclusion (an outage its dependency watch detected, or one staff declared):
    the evidence is packaged when it is opened, from the log and the watch's checks of the window."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        UPHELD = "upheld", "Upheld (the exclusion stands)"
        WITHDRAWN = "withdrawn", "Withdrawn (the exclusion was removed)"

    exclusion = models.ForeignKey(Exclusion, on_delete=models.PROTECT, related_name="appeals")
    reason = models.TextField()
    evidence = models.JSONField(help_text="The window's raw batch hashes, its records' digest, the checks.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    opened_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    opened_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-opened_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["exclusion"],
                condition=models.Q(status="open"),
                name="sla_one_open_appeal_per_exclusion",
            ),
        ]

    def __str__(self) -> str:
        return f"appeal of exclusion {self.exclusion_id} ({self.status})"
