from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from accounts.models import Tenant
from accounts.validators import validate_slug_code
from common.money import CURRENCY_CHOICES, DEFAULT_CURRENCY, MINOR_UNITS, round_money, validate_currency
from pricing.charge_models import CHARGE_MODEL_CHOICES, PER_UNIT
from pricing.errors import TermsError
from pricing.expressions import parse_metric
from pricing.validation import validate_charge


class OnnxArtifact(models.Model):
    """An uploaded ONNX model file, kept by its SHA-256 (the executor checks the digest before loading)."""

    sha256 = models.CharField(max_length=64, primary_key=True)
    content = models.BinaryField()
    size = models.PositiveBigIntegerField()
    opset = models.PositiveIntegerField(help_text="The model's default-domain opset version.")
    uploaded_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.sha256


class Capability(models.Model):
    """An atomic capability (OCR, clause extraction) that packages share: the model serving it, the JSON
    schemas of what it takes and answers, its SLA timeout, and the outcome rule that accepts a result."""

    class Engine(models.TextChoices):
        MOE = "moe", "MoE chat model (the agents' engine)"
        ONNX = "onnx", "ONNX model (the agents' onnxruntime executor)"

    code = models.CharField(max_length=64, unique=True, validators=[validate_slug_code])
    name = models.CharField(max_length=200)
    owner = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="capabilities",
        help_text="The tenant whose package factory made it; empty: the platform's own.",
    )
    engine = models.CharField(max_length=8, choices=Engine.choices)
    model_id = models.CharField(max_length=128, help_text="The model id requests name (the records' model).")
    artifact = models.ForeignKey(
        OnnxArtifact, null=True, blank=True, on_delete=models.PROTECT, related_name="capabilities"
    )
    input_schema = models.JSONField(default=dict, help_text="JSON Schema of a request's input.")
    output_schema = models.JSONField(default=dict, help_text="JSON Schema of its answer.")
    sla_timeout_ms = models.PositiveIntegerField(help_text="A call running longer fails its SLA.")
    acceptance_rule = models.TextField(
        blank=True,
        help_text="The outcome rule accepting a result, e.g. 'outcome_f1 >= 0.92'.",
    )

    class Meta:
        ordering = ["code"]
        verbose_name_plural = "capabilities"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(engine="onnx", artifact__isnull=False)
                | models.Q(engine="moe", artifact__isnull=True),
                name="capability_onnx_has_artifact",
            ),
        ]

    def __str__(self) -> str:
        return self.code

    def clean(self) -> None:
        if self.acceptance_rule:
            try:
                parse_metric(self.acceptance_rule, rule=True)
            except TermsError as error:
                raise ValidationError({"acceptance_rule": error.message}) from None


class ComputePackage(models.Model):
    """A business compute package ("review contracts"), sold instead of GPU hours: a set of capabilities
    billed per business `unit` (`contract_review_event`). A package with an `owner` was made by that
    tenant's package factory: only that tenant sees and buys it."""

    code = models.CharField(max_length=64, unique=True, validators=[validate_slug_code])
    name = models.CharField(max_length=200)
    unit = models.CharField(max_length=64, default="request", help_text="What one unit of the package is.")
    description = models.TextField(blank=True)
    active = models.BooleanField(default=True)
    owner = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="own_packages"
    )
    capabilities = models.ManyToManyField(Capability, through="PackageCapability", related_name="packages")
    margin_factor = models.DecimalField(
        max_digits=6,
        decimal_places=3,
        default=Decimal("1.3"),
        validators=[MinValueValidator(0)],
        help_text="Suggested base fee = the package's cost per contract and period × this factor.",
    )

    class Meta:
        ordering = ["code"]

    def __str__(self) -> str:
        return self.code


class PackageCapability(models.Model):
    """A capability in a package; an event of the package is billable once its required ones succeed."""

    package = models.ForeignKey(ComputePackage, on_delete=models.CASCADE, related_name="package_capabilities")
    capability = models.ForeignKey(Capability, on_delete=models.PROTECT, related_name="package_capabilities")
    required = models.BooleanField(default=True)

    class Meta:
        ordering = ["package", "capability"]
        verbose_name_plural = "package capabilities"
        constraints = [
            models.UniqueConstraint(fields=["package", "capability"], name="one_capability_per_package"),
        ]

    def __str__(self) -> str:
        return f"{self.package.code}/{self.capability.code}"


class HostCostProfile(models.Model):
    """What an hour of one agent host class costs. A record's cost: its L3 (GPU) seconds at
    depreciation + power, plus its L1 + L2 (routing, expert cache) seconds at operations."""

    host_class = models.CharField(max_length=64, unique=True)
    currency = models.CharField(
        max_length=3, choices=CURRENCY_CHOICES, default=DEFAULT_CURRENCY, validators=[validate_currency]
    )
    depreciation_per_hour = models.DecimalField(
        max_digits=12, decimal_places=4, validators=[MinValueValidator(0)]
    )
    power_per_hour = models.DecimalField(max_digits=12, decimal_places=4, validators=[MinValueValidator(0)])
    operations_per_hour = models.DecimalField(
        max_digits=12, decimal_places=4, validators=[MinValueValidator(0)]
    )

    class Meta:
        ordering = ["host_class"]

    def __str__(self) -> str:
        return self.host_class


class PackagePlan(models.Model):
    """A purchasable plan of a package: currency, period, base fee, and its price templates per dimension.

    Buying it (billing.purchases.purchase_package) copies these terms into a new Contract. `payment`
    picks how: Stripe Checkout (the contract waits in `pending_payment` until the session is paid;
    the session charges the first period's base fee as prepaid credits) or an invoice (active at once).
    """

    class Payment(models.TextChoices):
        CHECKOUT = "checkout", "Stripe Checkout"
        INVOICE = "invoice", "Invoice"

    package = models.ForeignKey(ComputePackage, on_delete=models.CASCADE, related_name="plans")
    code = models.CharField(max_length=64, validators=[validate_slug_code])
    name = models.CharField(max_length=200)
    currency = models.CharField(
        max_length=3, choices=CURRENCY_CHOICES, default=DEFAULT_CURRENCY, validators=[validate_currency]
    )
    period = models.CharField(max_length=16, choices=[("monthly", "Monthly")], default="monthly")
    base_fee = models.DecimalField(
        max_digits=20, decimal_places=2, default=Decimal(0), validators=[MinValueValidator(0)]
    )
    payment = models.CharField(max_length=16, choices=Payment.choices, default=Payment.INVOICE)
    active = models.BooleanField(default=True)

    class Meta:
        ordering = ["package", "code"]
        constraints = [
            models.UniqueConstraint(fields=["package", "code"], name="one_plan_code_per_package"),
            models.CheckConstraint(condition=models.Q(base_fee__gte=0), name="plan_base_fee_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.package.code}/{self.code}"

    def clean(self) -> None:
        if self.payment == self.Payment.CHECKOUT and not self.base_fee:
            raise ValidationError("A Stripe Checkout plan needs a base fee to charge.")
        if self.currency in MINOR_UNITS and round_money(self.base_fee, self.currency) != self.base_fee:
            raise ValidationError(f"The base fee has more decimals than {self.currency} allows.")


class PlanPrice(models.Model):
    """A price template: copied into a ContractPrice of every contract bought on the plan."""

    plan = models.ForeignKey(PackagePlan, on_delete=models.CASCADE, related_name="prices")
    dimension = models.CharField(max_length=32, help_text="A Dimension value (pricing.dimensions).")
    charge_model = models.CharField(max_length=16, choices=CHARGE_MODEL_CHOICES, default=PER_UNIT)
    unit_price = models.DecimalField(
        max_digits=20, decimal_places=8, default=Decimal(0), validators=[MinValueValidator(0)]
    )
    properties = models.JSONField(default=dict, blank=True, help_text="Tiers etc. of non-per-unit models.")
    included_quantity = models.DecimalField(
        max_digits=24,
        decimal_places=6,
        default=Decimal(0),
        validators=[MinValueValidator(0)],
        help_text="Free each period: the quota.",
    )

    class Meta:
        ordering = ["plan", "dimension"]
        constraints = [
            models.UniqueConstraint(fields=["plan", "dimension"], name="one_plan_price_per_dimension"),
        ]

    def __str__(self) -> str:
        return f"{self.plan} {self.dimension} {self.charge_model}"

    def clean(self) -> None:
        """The admin's forms get the charge checks contract prices get (pricing.validation)."""
        properties = dict(self.properties or {})
        if self.charge_model == "per_unit":
            properties.setdefault("unit_price", str(self.unit_price))
        try:
            validate_charge(self.dimension, self.charge_model, properties, set())
        except TermsError as error:
            raise ValidationError(f"{error.message} ({error.code})") from None


class ModelPrice(models.Model):
    """One version of one model's list prices per token, in one currency: input, output, prefix-cache
    reads and prefix-cache writes (LiteLLM's `model_prices_and_context_window.json` has the same four).
    A version is in force from its `effective_from` day (00:00 UTC) until the next version of the same
    model and currency; a record is priced by the version in force on its start day. An empty cache
    price means the model's input price. Versions are never edited once stored: a new price is a new
    version (catalog.model_prices)."""

    model_id = models.CharField(max_length=128, help_text="The records' model_id.")
    currency = models.CharField(max_length=3, choices=CURRENCY_CHOICES, validators=[validate_currency])
    effective_from = models.DateField(help_text="UTC day from which this version is in force.")
    input_per_token = models.DecimalField(max_digits=24, decimal_places=15, validators=[MinValueValidator(0)])
    output_per_token = models.DecimalField(
        max_digits=24, decimal_places=15, validators=[MinValueValidator(0)]
    )
    cache_read_per_token = models.DecimalField(
        max_digits=24, decimal_places=15, null=True, blank=True, validators=[MinValueValidator(0)]
    )
    cache_write_per_token = models.DecimalField(
        max_digits=24, decimal_places=15, null=True, blank=True, validators=[MinValueValidator(0)]
    )
    provider = models.CharField(max_length=64, blank=True, help_text="LiteLLM's litellm_provider.")
    mode = models.CharField(max_length=32, blank=True, help_text="LiteLLM's mode (chat, embedding, …).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model_id", "currency", "effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["model_id", "currency", "effective_from"], name="one_model_price_per_day"
            ),
            models.CheckConstraint(
                condition=models.Q(input_per_token__gte=0, output_per_token__gte=0),
                name="model_price_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model_id} {self.currency} from {self.effective_from.isoformat()}"
