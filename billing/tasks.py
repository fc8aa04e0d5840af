from __future__ import annotations

from celery import shared_task

from contracts.models import Contract

from .periods import month_bounds
from .services import generate_invoice


@shared_task(name="billing.generate_invoice")
def generate_invoice_task(contract_code: str, month: str) -> int:
    """Invoice one contract for one closed calendar month (UTC). Returns the invoice id; safe to retry."""
    start, end = month_bounds(month)
    contract = Contract.objects.get(code=contract_code)
    return generate_invoice(contract.pk, start, end).pk
