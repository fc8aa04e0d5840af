"""Late records: usage that reached the store after its period's invoice was finalised.

When a later period is invoiced, each recently finalised invoice of the contract is re-measured (one
aggregate query per earlier period, at most LOOKBACK of them) and compared with what it billed plus
the adjustments already made. The difference is priced with the terms the old invoice froze and
becomes an adjustment line, unless the contract ignores late usage older than `late_usage_days`;
either way a LateUsage row reports it.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from contracts.models import Contract

from .models import Invoice, InvoiceLine, LateUsage
from .rating import RatedLine, rate_charge
from .selectors import period_usage
from .terms import Terms

LOOKBACK = 12
ZERO = Decimal(0)


def late_usage_adjustments(contract: Contract, period_start: datetime, now: datetime) -> list[RatedLine]:
    earlier = Invoice.objects.filter(
        contract=contract,
        status__in=[Invoice.Status.FINALIZED, Invoice.Status.PAID],
        period_end__lte=period_start,
    ).order_by("-period_start")[:LOOKBACK]
    lines: list[RatedLine] = []
    for invoice in earlier:
        lines += _adjust(contract, invoice, period_start, now)
    return lines


def _adjust(contract: Contract, invoice: Invoice, period_start: datetime, now: datetime) -> list[RatedLine]:
    terms = Terms.from_json(invoice.terms)
    measured = period_usage(
        contract.tenant.code,
        contract.code,
        invoice.period_start,
        invoice.period_end,
        terms.metrics,
        as_of=invoice.finalized_at,  # later exclusions were credited by notes: never twice
    )
    billed: dict[str, Decimal] = defaultdict(Decimal)
    for dimension, quantity in invoice.terms.get("quantities", {}).items():
        billed[dimension] += Decimal(quantity)
    earlier_adjustments = InvoiceLine.objects.filter(
        invoice__contract=contract,
        kind=InvoiceLine.Kind.ADJUSTMENT,
        details__period_start=invoice.period_start.isoformat(),
    ).exclude(invoice__period_start=period_start)
    for line in earlier_adjustments:
        billed[line.dimension] += line.quantity
    too_old = (
        contract.late_usage_policy == Contract.LateUsage.IGNORE_AFTER
        and invoice.finalized_at is not None
        and now - invoice.finalized_at > timedelta(days=contract.late_usage_days)
    )
    lines = []
    for charge in terms.charges:
        late = measured.quantities.get(charge.dimension, ZERO) - billed[charge.dimension]
        if late <= 0:
            continue
        value = measured.values.get(charge.dimension, ZERO)
        before = rate_charge(charge, billed[charge.dimension], value, terms.currency)
        after = rate_charge(charge, billed[charge.dimension] + late, value, terms.currency)
        amount = after.amount - before.amount
        decision = LateUsage.Decision.IGNORED if too_old else LateUsage.Decision.ADJUSTED
        LateUsage.objects.update_or_create(
            invoice=invoice,
            dimension=charge.dimension,
            defaults={"quantity": late, "amount": amount, "decision": decision, "detected_at": now},
        )
        if too_old:
            continue
        lines.append(
            RatedLine(
                dimension=charge.dimension,
                description=f"Late usage {invoice.period_start:%Y-%m} ({invoice.number}): {charge.label}",
                quantity=late,
                unit_price=(amount / late).quantize(Decimal("1E-8")),
                amount=amount,
                kind="adjustment",
                details={"period_start": invoice.period_start.isoformat(), "invoice": invoice.number},
            )
        )
    return lines
