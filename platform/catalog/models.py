from decimal import Decimal

from django.core.validators import MinValueValidator
from django.db import models

from accounts.validators import validate_slug_code
from contracts.money import CURRENCY_CHOICES, DEFAULT_CURRENCY, validate_currency


class ComputePackage(models.Model):
    """A business compute package ("review contracts"), sold instead of GPU hours."""

    code = models.CharField(max_length=64, unique=True, validators=[validate_slug_code])
    name = models.CharField(max_length=200)
    unit = models.CharField(max_length=64, default="request", help_text="What one unit of the package is.")
    description = models.TextField(blank=True)
    active = models.BooleanField(default=True)
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
