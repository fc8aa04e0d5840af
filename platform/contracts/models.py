from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from accounts.models import Tenant
from accounts.validators import validate_slug_code
from catalog.models import ComputePackage, PackagePlan
from common.money import CURRENCY_CHOICES, DEFAULT_CURRENCY, validate_currency
from pricing.charge_models import CHARGE_MODEL_CHOICES, PER_UNIT
from pricing.errors import BillingError
from pricing.validation import validate_charge

from .versions import check_price_version

ZERO = Decimal(0)


class ContractQuerySet(models.QuerySet["Contract"]):
    def billable(self) -> ContractQuerySet:
        """Contracts that may be invoiced: not one waiting for its Checkout payment, nor one never paid,
        nor a sandbox's."""
        return self.exclude(status__in=NEVER_BILLED).exclude(sandbox=True)

    def production(self) -> ContractQuerySet:
        """Every contract but the sandboxes' (whose figures never reach production ones)."""
        return self.exclude(sandbox=True)


class Contract(models.Model):
    """A tenant's contract for one compute package. `code` is the `contract` field of each record.

    Besides the per-dimension charges (ContractPrice) the contract carries the period terms: a base fee
    billed in advance or in arrears, a minimum commitment (a true-up line tops the usage up to it), tax,
    a grace period for late records before the invoice is finalised, the late-usage policy, and which
    invoice line kinds prepaid credits may pay, in order.
    """

    class Period(models.TextChoices):
        MONTHLY = "monthly", "Monthly"

    class Status(models.TextChoices):
        PENDING_PAYMENT = "pending_payment", "Waiting for payment (not served, not billed)"
        ACTIVE = "active", "Active"
        ENDED = "ended", "Ended"
        CANCELLED = "cancelled", "Never paid (never served, never billed)"

    class FeeTiming(models.TextChoices):
        ADVANCE = "advance", "In advance (the coming period)"
        ARREARS = "arrears", "In arrears (the closed period)"

    class LateUsage(models.TextChoices):
        NEXT_INVOICE = "next_invoice", "Adjustment lines on the next invoice"
        IGNORE_AFTER = "ignore_after", "Adjust on the next invoice unless older than late_usage_days; report"

    code = models.CharField(max_length=64, unique=True, validators=[validate_slug_code])
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="contracts")
    sandbox = models.BooleanField(
        default=False,
        editable=False,
        help_text="A customer sandbox's contract: its records are kept apart; never invoiced.",
    )
    package = models.ForeignKey(ComputePackage, on_delete=models.PROTECT, related_name="contracts")
    plan = models.ForeignKey(
        PackagePlan,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="contracts",
        help_text="The catalogue plan it was bought on; empty for contracts written by staff.",
    )
    checkout_session_id = models.CharField(
        max_length=255, blank=True, db_index=True, help_text="The Stripe Checkout Session that pays it."
    )
    currency = models.CharField(
        max_length=3, choices=CURRENCY_CHOICES, default=DEFAULT_CURRENCY, validators=[validate_currency]
    )
    period = models.CharField(max_length=16, choices=Period.choices, default=Period.MONTHLY)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    issuing_entity = models.CharField(
        max_length=64, default="treemeter", help_text="Invoice numbers are gapless per issuing entity."
    )
    payment_terms_days = models.PositiveIntegerField(
        default=30, help_text="An invoice is due this many days after it is issued (finalised)."
    )
    base_fee = models.DecimalField(
        max_digits=20, decimal_places=8, default=ZERO, validators=[MinValueValidator(0)]
    )
    base_fee_timing = models.CharField(max_length=8, choices=FeeTiming.choices, default=FeeTiming.ARREARS)
    minimum_commitment = models.DecimalField(
        max_digits=20,
        decimal_places=2,
        default=ZERO,
        validators=[MinValueValidator(0)],
        help_text="Per period, against usage charges + base fee before discounts.",
    )
    tax_rate = models.DecimalField(
        max_digits=6,
        decimal_places=4,
        default=ZERO,
        validators=[MinValueValidator(0)],
        help_text="0.06 = 6 %.",
    )
    tax_inclusive = models.BooleanField(default=False, help_text="Prices include the tax.")
    grace_days = models.PositiveIntegerField(default=0, help_text="Days after the period for late records.")
    late_usage_policy = models.CharField(
        max_length=16, choices=LateUsage.choices, default=LateUsage.NEXT_INVOICE
    )
    late_usage_days = models.PositiveIntegerField(default=90)
    outcome_window_hours = models.PositiveIntegerField(
        default=72, help_text="How long a declared outcome stays pending for confirmation or revocation."
    )
    outcome_on_expiry = models.CharField(
        max_length=8,
        choices=[("confirm", "Confirm when the window closes"), ("revoke", "Revoke when the window closes")],
        default="confirm",
    )
    outcome_rule = models.TextField(
        blank=True,
        help_text="Confirms outcomes at once, e.g. 'outcome_f1 >= 0.92 and p99_latency_ms <= 300'.",
    )
    pause_billing_on_customer_dependency = models.BooleanField(
        default=False,
        help_text="Requests in an SLA customer-dependency exclusion are not billed (docs/billing.md).",
    )
    price_by_catalogue = models.BooleanField(
        default=False,
        help_text="Tokens are priced per model by the LLM price catalogue (catalog.ModelPrice), in force "
        "on each record's start day, with the adjustment below.",
    )
    catalogue_adjustment = models.DecimalField(
        max_digits=6,
        decimal_places=4,
        default=ZERO,
        validators=[MinValueValidator(-1)],
        help_text="On the catalogue's prices: 0.10 is a 10 % markup, -0.15 a 15 % discount.",
    )
    credit_order = models.JSONField(
        default=list,
        blank=True,
        help_text='Line kinds credits may pay, in order, e.g. ["usage", "base_fee"]; empty: all.',
    )

    objects = ContractQuerySet.as_manager()

    class Meta:
        ordering = ["code"]
        constraints = [
            models.CheckConstraint(condition=models.Q(base_fee__gte=0), name="base_fee_not_negative"),
            models.CheckConstraint(
                condition=models.Q(minimum_commitment__gte=0), name="commitment_not_negative"
            ),
            models.CheckConstraint(condition=models.Q(tax_rate__gte=0), name="tax_rate_not_negative"),
            models.CheckConstraint(
                condition=models.Q(catalogue_adjustment__gte=-1),
                name="catalogue_adjustment_at_least_minus_one",
            ),
        ]

    def __str__(self) -> str:
        return self.code

    def held_packages(self) -> list[ComputePackage]:
        """Its own package, then the further ones it holds (ContractPackage), by code."""
        further = ComputePackage.objects.filter(held_by__contract=self).order_by("code")
        return [self.package, *(p for p in further if p.pk != self.package_id)]

    def event_packages(self) -> dict[str, list[ComputePackage]]:
        """The packages it holds that are measured in business events (those with capabilities), by
        their unit: a price named by a unit bills that package's events (billing.terms)."""
        held = self.held_packages()
        measured = set(
            ComputePackage.objects.filter(
                pk__in=[p.pk for p in held], package_capabilities__isnull=False
            ).values_list("pk", flat=True)
        )
        found: dict[str, list[ComputePackage]] = {}
        for package in held:
            if package.pk in measured:
                found.setdefault(package.unit, []).append(package)
        return found

    def priced_codes(self) -> set[str]:
        """What a price may name besides the built-in dimensions: its custom metrics' codes and its
        business-event units."""
        return set(self.metrics.values_list("code", flat=True)) | set(self.event_packages())


class ContractPackage(models.Model):
    """A further package a contract holds beside its own (`Contract.package`): its keys may be issued for
    it, and their requests are then made under it, reaching only its capabilities' models. The contract's
    prices and terms cover every package it holds."""

    contract = models.ForeignKey(Contract, on_delete=models.CASCADE, related_name="further_packages")
    package = models.ForeignKey(ComputePackage, on_delete=models.PROTECT, related_name="held_by")

    class Meta:
        ordering = ["contract", "package"]
        constraints = [
            models.UniqueConstraint(fields=["contract", "package"], name="one_package_per_contract_once"),
        ]

    def __str__(self) -> str:
        return f"{self.contract.code} + {self.package.code}"


class ContractMetric(models.Model):
    """A custom metric: an expression over record fields (pricing.expressions), priced like a dimension."""

    contract = models.ForeignKey(Contract, on_delete=models.CASCADE, related_name="metrics")
    code = models.CharField(max_length=32, validators=[validate_slug_code])
    name = models.CharField(max_length=200)
    expression = models.TextField()

    class Meta:
        ordering = ["contract", "code"]
        constraints = [models.UniqueConstraint(fields=["contract", "code"], name="one_metric_per_code")]

    def __str__(self) -> str:
        return f"{self.contract.code} {self.code} = {self.expression}"


class ContractTax(models.Model):
    """One tax the contract's invoice lines carry (billing.taxes): e.g. VAT 6 % for IT services, with a
    surcharge beside it. A contract with taxes uses them instead of its single `tax_rate`."""

    contract = models.ForeignKey(Contract, on_delete=models.CASCADE, related_name="taxes")
    code = models.CharField(max_length=32, validators=[validate_slug_code])
    name = models.CharField(max_length=100)
    rate = models.DecimalField(
        max_digits=6, decimal_places=4, validators=[MinValueValidator(0)], help_text="0.06 is 6 %."
    )
    applies_to = models.JSONField(
        default=list, blank=True, help_text="Line kinds or dimensions it applies to; empty: every line."
    )

    class Meta:
        ordering = ["contract", "id"]
        verbose_name_plural = "contract taxes"
        constraints = [models.UniqueConstraint(fields=["contract", "code"], name="one_tax_per_code")]

    def __str__(self) -> str:
        return f"{self.contract.code} {self.code} {self.rate}"


NEVER_BILLED = (Contract.Status.PENDING_PAYMENT, Contract.Status.CANCELLED)


class ContractPrice(models.Model):
    """The charge for one metered dimension (or custom metric code), in the contract's currency.

    `charge_model` is a kind of pricing.charge_models.CHARGE_MODELS; `per_unit` uses `unit_price`, the
    others `properties` (tiers, package size, rate, minimum/maximum). `included_quantity` is free each
    period (the quota); what exceeds it is the overage that the charge model prices.

    A dimension may have several versions: each applies from its `effective_from` (empty: the contract
    start) until the next version's; rating splits a period at the change (docs/billing.md, "Price
    changes within a contract").
    """

    contract = models.ForeignKey(Contract, on_delete=models.CASCADE, related_name="prices")
    dimension = models.CharField(max_length=32, help_text="A Dimension value or a ContractMetric code.")
    charge_model = models.CharField(max_length=16, choices=CHARGE_MODEL_CHOICES, default=PER_UNIT)
    unit_price = models.DecimalField(max_digits=20, decimal_places=8, default=ZERO)
    properties = models.JSONField(default=dict, blank=True)
    included_quantity = models.DecimalField(max_digits=24, decimal_places=6, default=ZERO)
    effective_from = models.DateTimeField(
        null=True,
        blank=True,
        help_text="UTC; this version applies from then until the next. Empty: from the start.",
    )

    class Meta:
        ordering = ["contract", "dimension", models.F("effective_from").asc(nulls_first=True)]
        constraints = [
            models.UniqueConstraint(
                fields=["contract", "dimension", "effective_from"], name="one_price_version_per_instant"
            ),
            models.UniqueConstraint(  # NULLs are distinct in a unique index: one initial version
                fields=["contract", "dimension"],
                condition=models.Q(effective_from__isnull=True),
                name="one_initial_price_per_dimension",
            ),
            models.CheckConstraint(condition=models.Q(unit_price__gte=0), name="unit_price_not_negative"),
            models.CheckConstraint(
                condition=models.Q(included_quantity__gte=0), name="included_not_negative"
            ),
        ]

    def __str__(self) -> str:
        since = f" from {self.effective_from.isoformat()}" if self.effective_from else ""
        return f"{self.contract.code} {self.dimension} {self.charge_model}{since}"

    def clean(self) -> None:
        """The admin's forms get the same checks as the API (contracts.services.set_charge), the
        invoiced-period guard billing adds (contracts.versions.add_price_version_guard) included."""
        properties = dict(self.properties or {})
        if self.charge_model == PER_UNIT:
            properties.setdefault("unit_price", str(self.unit_price))
        codes = self.contract.priced_codes() if self.contract_id else set()
        try:
            validate_charge(self.dimension, self.charge_model, properties, codes)
            if self.contract_id and self.effective_from is not None and self._moved():
                self.effective_from = check_price_version(self.contract, self.dimension, self.effective_from)
        except BillingError as error:  # TermsError too
            raise ValidationError(f"{error.message} ({error.code})") from None

    def _moved(self) -> bool:
        """A new version, or one whose start changes (editing a version's terms in place is allowed)."""
        stored = ContractPrice.objects.filter(pk=self.pk).values_list("effective_from", flat=True).first()
        return self.pk is None or stored != self.effective_from


_BEGINNING = datetime.min.replace(tzinfo=UTC)


def prices_in_effect(prices: Iterable[ContractPrice], moment: datetime) -> list[ContractPrice]:
    """Of a contract's price versions, the one of each dimension that applies at `moment` (none for a
    dimension whose first version starts later), in dimension order."""
    current: dict[str, ContractPrice] = {}
    for price in sorted(prices, key=lambda p: (p.dimension, p.effective_from or _BEGINNING)):
        if price.effective_from is None or price.effective_from <= moment:
            current[price.dimension] = price
    return list(current.values())
