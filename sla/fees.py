"""The fee a service credit is a percentage of: what billing invoiced the contract for that month.

Billing invoices calendar months in UTC; an SLA month is the same YYYY-MM in the policy's zone. The
basis is the finalised invoice's net subtotal (before tax), without service credits it carried for
earlier months: billing puts the credit before tax, so it also lowers the tax by the same percentage.
"""

from __future__ import annotations

from decimal import Decimal

from django.db.models import Sum

from billing.models import OPEN_STATUSES, Invoice, InvoiceLine
from common.periods import month_bounds
from contracts.models import Contract


def period_fee(contract: Contract, month: str) -> Decimal | None:
    """The invoiced net fee for the contract's UTC month `month`, or None until that invoice is
    finalised (a draft in its grace period can still change)."""
    start, end = month_bounds(month, "UTC")
    invoice = (
        Invoice.objects.filter(contract=contract, period_start=start, period_end=end)
        .exclude(status__in=[*OPEN_STATUSES, Invoice.Status.VOID])
        .first()
    )
    if invoice is None:
        return None
    credited = invoice.lines.filter(kind=InvoiceLine.Kind.SERVICE_CREDIT).aggregate(total=Sum("amount"))
    return invoice.subtotal - (credited["total"] or Decimal(0))
