from django.db import models

from accounts.models import Tenant
from contracts.dimensions import Dimension
from contracts.models import Contract


class Invoice(models.Model):
    """One contract's bill for one closed period. There is never more than one per contract and period."""

    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        FINALIZED = "finalized", "Finalized"

    contract = models.ForeignKey(Contract, on_delete=models.PROTECT, related_name="invoices")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="invoices")
    period_start = models.DateTimeField()
    period_end = models.DateTimeField(help_text="Exclusive.")
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DRAFT)
    record_count = models.BigIntegerField(help_text="Usage records (all outcomes) the period holds.")
    total = models.DecimalField(max_digits=20, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-period_start", "contract"]
        constraints = [
            models.UniqueConstraint(
                fields=["contract", "period_start", "period_end"], name="one_invoice_per_contract_period"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.contract.code} {self.period_start:%Y-%m}"


class InvoiceLine(models.Model):
    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="lines")
    dimension = models.CharField(max_length=32, choices=Dimension.choices)
    description = models.CharField(max_length=200)
    quantity = models.DecimalField(max_digits=24, decimal_places=6)
    unit_price = models.DecimalField(max_digits=20, decimal_places=8)
    amount = models.DecimalField(max_digits=20, decimal_places=2)

    class Meta:
        ordering = ["invoice", "id"]

    def __str__(self) -> str:
        return f"{self.dimension}: {self.quantity} × {self.unit_price} = {self.amount}"
