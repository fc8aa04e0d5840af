"""Writes for billing."""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from contracts.models import Contract

from .models import Invoice, InvoiceLine
from .rating import rate_usage
from .selectors import period_usage


class BillingError(ValueError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def generate_invoice(contract_id: int, period_start: datetime, period_end: datetime) -> Invoice:
    """Rate a contract's records for a closed period into one invoice with itemised lines.

    Idempotent, also when run concurrently: the contract row is locked while the invoice is made,
    and a unique constraint on (contract, period) backs it up; a second run returns the first invoice.
    """
    if period_end > timezone.now():
        raise BillingError("period_open", f"The period ending {period_end.isoformat()} has not closed yet.")
    if period_start >= period_end:
        raise BillingError("invalid_period", "The period must start before it ends.")
    try:
        with transaction.atomic():
            contract = Contract.objects.select_for_update().select_related("tenant").get(pk=contract_id)
            existing = Invoice.objects.filter(
                contract=contract, period_start=period_start, period_end=period_end
            ).first()
            if existing is not None:
                return existing
            usage = period_usage(contract.tenant.code, contract.code, period_start, period_end)
            prices = {p.dimension: p.unit_price for p in contract.prices.all()}
            lines = rate_usage(usage.quantities, prices, contract.currency)
            invoice = Invoice.objects.create(
                contract=contract,
                tenant=contract.tenant,
                period_start=period_start,
                period_end=period_end,
                currency=contract.currency,
                record_count=usage.record_count,
                total=sum((line.amount for line in lines), start=0),
            )
            InvoiceLine.objects.bulk_create(
                InvoiceLine(
                    invoice=invoice,
                    dimension=line.dimension,
                    description=line.description,
                    quantity=line.quantity,
                    unit_price=line.unit_price,
                    amount=line.amount,
                )
                for line in lines
            )
            return invoice
    except IntegrityError:
        return Invoice.objects.get(contract_id=contract_id, period_start=period_start, period_end=period_end)
