"""Late records: usage that reached the store after its period's invoice was finalised.

When a later period is invoiced, each recently finalised invoice of the contract is re-measured (one
aggregate query per earlier period, at most LOOKBACK of them) and compared with what it billed plus
the adjustments already made. The difference is priced with the terms the old invoice froze and
becomes an adjustment line, unless the contract ignores late usage older than `late_usage_days`;
either way a LateUsage row reports it.

A dimension whose price changed within the old period gets one adjustment line all the same: its
versions are rated on the usage per price segment before and after the late records
(`rate_versions`, so quota, tiers and period bounds run as on the invoice), and the line is the
difference. The line's `details.segments` keeps the late quantity per segment for later comparisons.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from decimal import Decimal

from contracts.models import Contract

from .models import Invoice, InvoiceLine, LateUsage
from .rating import PeriodUsage, RatedLine, SegmentUsage, rate_versions
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


def _billed(invoice: Invoice, measured: PeriodUsage, adjustments: Iterable[InvoiceLine]) -> PeriodUsage:
    """What the invoice billed (its quantities, per price segment when it has them) plus the late
    usage earlier adjustment lines billed. An adjustment without per-segment quantities (made before
    price versions existed) counts in the last segment."""
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for dimension, quantity in invoice.terms.get("quantities", {}).items():
        totals[dimension] += Decimal(quantity)
    segments = [
        (s.start, s.end, defaultdict(Decimal, s.quantities))
        for s in map(SegmentUsage.from_json, invoice.terms.get("segments", []))
    ]
    for line in adjustments:
        totals[line.dimension] += line.quantity
        if not segments:
            continue
        parts = line.details.get("segments")
        if parts is not None and len(parts) == len(segments):
            for (_, _, quantities), part in zip(segments, parts, strict=True):
                quantities[line.dimension] += Decimal(part)
        else:
            segments[-1][2][line.dimension] += line.quantity
    return PeriodUsage(
        measured.record_count,
        dict(totals),
        measured.values,
        segments=tuple(SegmentUsage(start, end, dict(q)) for start, end, q in segments),
    )


def _adjust(contract: Contract, invoice: Invoice, period_start: datetime, now: datetime) -> list[RatedLine]:
    terms = Terms.from_json(invoice.terms)
    start, end = invoice.period_start, invoice.period_end
    measured = period_usage(
        contract.tenant.code,
        contract.code,
        start,
        end,
        terms.metrics,
        as_of=invoice.finalized_at,  # later exclusions were credited by notes: never twice
        bounds=terms.change_instants(start, end),
    )
    earlier_adjustments = InvoiceLine.objects.filter(
        invoice__contract=contract,
        kind=InvoiceLine.Kind.ADJUSTMENT,
        details__period_start=start.isoformat(),
    ).exclude(invoice__period_start=period_start)
    billed = _billed(invoice, measured, earlier_adjustments)
    too_old = (
        contract.late_usage_policy == Contract.LateUsage.IGNORE_AFTER
        and invoice.finalized_at is not None
        and now - invoice.finalized_at > timedelta(days=contract.late_usage_days)
    )
    lines = []
    for dimension, versions in terms.versions().items():
        late = measured.quantities.get(dimension, ZERO) - billed.quantities.get(dimension, ZERO)
        if late <= 0:
            continue
        after = rate_versions(versions, measured, start, end, terms.currency)
        before = rate_versions(versions, billed, start, end, terms.currency)
        amount = sum((line.amount for line in after), ZERO) - sum((line.amount for line in before), ZERO)
        decision = LateUsage.Decision.IGNORED if too_old else LateUsage.Decision.ADJUSTED
        LateUsage.objects.update_or_create(
            invoice=invoice,
            dimension=dimension,
            defaults={"quantity": late, "amount": amount, "decision": decision, "detected_at": now},
        )
        if too_old:
            continue
        details: dict[str, object] = {"period_start": start.isoformat(), "invoice": invoice.number}
        if measured.segments and len(measured.segments) == len(billed.segments):
            details["segments"] = [
                str(part.quantities.get(dimension, ZERO) - was.quantities.get(dimension, ZERO))
                for part, was in zip(measured.segments, billed.segments, strict=True)
            ]
        lines.append(
            RatedLine(
                dimension=dimension,
                description=f"Late usage {start:%Y-%m} ({invoice.number}): {versions[-1].label}",
                quantity=late,
                unit_price=(amount / late).quantize(Decimal("1E-8")),
                amount=amount,
                kind="adjustment",
                details=details,
            )
        )
    return lines
