from django.db import models

from accounts.models import Tenant
from accounts.validators import validate_slug_code
from catalog.models import ComputePackage

from .dimensions import Dimension
from .money import CURRENCY_CHOICES, DEFAULT_CURRENCY, validate_currency


class Contract(models.Model):
    """A tenant's contract for one compute package. `code` is the `contract` field of each record."""

    class Period(models.TextChoices):
        MONTHLY = "monthly", "Monthly"

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        ENDED = "ended", "Ended"

    code = models.CharField(max_length=64, unique=True, validators=[validate_slug_code])
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="contracts")
    package = models.ForeignKey(ComputePackage, on_delete=models.PROTECT, related_name="contracts")
    currency = models.CharField(
        max_length=3, choices=CURRENCY_CHOICES, default=DEFAULT_CURRENCY, validators=[validate_currency]
    )
    period = models.CharField(max_length=16, choices=Period.choices, default=Period.MONTHLY)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["code"]

    def __str__(self) -> str:
        return self.code


class ContractPrice(models.Model):
    """A per-unit price for one metered dimension, in the contract's currency."""

    contract = models.ForeignKey(Contract, on_delete=models.CASCADE, related_name="prices")
    dimension = models.CharField(max_length=32, choices=Dimension.choices)
    unit_price = models.DecimalField(max_digits=20, decimal_places=8)

    class Meta:
        ordering = ["contract", "dimension"]
        constraints = [
            models.UniqueConstraint(fields=["contract", "dimension"], name="one_price_per_dimension"),
            models.CheckConstraint(condition=models.Q(unit_price__gte=0), name="unit_price_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.contract.code} {self.dimension} @ {self.unit_price}"
