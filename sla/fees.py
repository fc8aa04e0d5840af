"""The fee a service credit is a percentage of: what billing invoiced the contract for that month.

Billing invoices calendar months in UTC; an SLA month is the same YYYY-MM in the policy's zone.
"""

from __future__ import annotations

from decimal import Decimal

from billing.models import Invoice
from contracts.models import Contract

from .periods import month_window


def period_fee(contract: Contract, month: str) -> Decimal | None:
    """The invoiced total for the contract's UTC month `month`, or None while it is not invoiced."""
    start, end = month_window(month, "UTC")
    invoice = Invoice.objects.filter(contract=contract, period_start=start, period_end=end).first()
    return None if invoice is None else invoice.total
