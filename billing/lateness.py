"""Late records: usage that reached the store after its period's invoice was finalised.

When a later period is invoiced, each recently finalised invoice of the contract (at most LOOKBACK of
them) is re-measured and compared with what it billed plus the adjustments already made. An invoice
run does it for a whole chunk of contracts at once (`LateUsageCheck.prepare`): one read of the earlier
invoices, one of their adjustment lines, and one aggregate query per earlier period (all the chunk's
contracts in it), instead of one per contract and period. The difference is priced with the terms the
old invoice froze and becomes an adjustment line, unless the contract ignores late usage older than
`late_usage_days`; either way a LateUsage row reports it.

A dimension whose price changed within the old period gets one adjustment line all the same: its
versions are rated on the usage per price segment before and after the late records
(`rate_versions`, so quota, tiers and period bounds run as on the invoice), and the line is the
difference. The line's `details.segments` keeps the late quantity per segment for later comparisons.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from contracts.models import Contract

from .catalogue import with_catalogue
from .catalogue_rating import MILLION, catalogue_charges
from .models import Invoice, InvoiceLine, LateUsage
from .rating import PeriodUsage, RatedLine, SegmentUsage, rate_versions, version_quantities
from .selectors import ContractMeter, usage_by_contract
from .terms import ChargeTerms, Terms

LOOKBACK = 12
ZERO = Decimal(0)


@dataclass
class LateUsageFound:
    """A contract's late usage: the adjustment lines to bill, and the LateUsage rows (not saved yet) that
    report each earlier invoice's late quantity per dimension, adjusted or ignored."""

    lines: list[RatedLine]
    reports: list[LateUsage]


def late_usage_adjustments(contract: Contract, period_start: datetime, now: datetime) -> LateUsageFound:
    """The contract's late usage, to be invoiced in the period starting then."""
    return LateUsageCheck.prepare([contract], period_start).adjustments(contract, now)


def record_late_usage(found: Iterable[tuple[LateUsageFound, Invoice]]) -> None:
    """Save the reports (one row per earlier invoice and dimension: a later detection replaces it),
    each adjusted one pointing at the invoice that bills it, in two statements."""
    adjusted, ignored = [], []
    for late, billing in found:
        for report in late.reports:
            if report.decision == LateUsage.Decision.ADJUSTED:
                report.billed_on = billing
                adjusted.append(report)
            else:
                ignored.append(report)
    for rows, fields in (
        (adjusted, ["quantity", "amount", "decision", "detected_at", "billed_on"]),
        (ignored, ["quantity", "amount", "decision", "detected_at"]),
    ):
        if rows:
            LateUsage.objects.bulk_create(
                rows, update_conflicts=True, unique_fields=["invoice", "dimension"], update_fields=fields
            )


@dataclass
class LateUsageCheck:
    """The earlier invoices of some contracts, re-measured, with the adjustments already billed for them."""

    earlier: dict[int, list[Invoice]]  # contract id → its newest finalised invoices before the period
    measured: dict[int, PeriodUsage]  # invoice id → its period's usage now
    adjusted: dict[tuple[int, str], list[InvoiceLine]]  # (contract id, period start) → adjustment lines

    @classmethod
    def prepare(cls, contracts: Sequence[Contract], period_start: datetime) -> LateUsageCheck:
        ids = [c.pk for c in contracts]
        earlier: dict[int, list[Invoice]] = defaultdict(list)
        for invoice in Invoice.objects.filter(
            contract_id__in=ids,
            status__in=[Invoice.Status.FINALIZED, Invoice.Status.PAID],
            period_end__lte=period_start,
        ).order_by("contract_id", "-period_start"):
            if len(earlier[invoice.contract_id]) < LOOKBACK:
                earlier[invoice.contract_id].append(invoice)
        adjusted: dict[tuple[int, str], list[InvoiceLine]] = defaultdict(list)
        if earlier:
            for line in (
                InvoiceLine.objects.filter(
                    invoice__contract_id__in=list(earlier), kind=InvoiceLine.Kind.ADJUSTMENT
                )
                .exclude(invoice__period_start=period_start)
                .select_related("invoice")
            ):
                adjusted[(line.invoice.contract_id, line.details.get("period_start", ""))].append(line)
        owners = {c.pk: c for c in contracts}
        invoices = [i for found in earlier.values() for i in found]
        return cls(dict(earlier), _remeasure(invoices, owners), dict(adjusted))

    def adjustments(self, contract: Contract, now: datetime) -> LateUsageFound:
        """The contract's late usage (nothing is saved: `record_late_usage` does, with the invoice)."""
        found = LateUsageFound([], [])
        for invoice in self.earlier.get(contract.pk, []):
            earlier_lines = self.adjusted.get((contract.pk, invoice.period_start.isoformat()), [])
            more = _adjust(contract, invoice, self.measured[invoice.pk], earlier_lines, now)
            found.lines += more.lines
            found.reports += more.reports
        return found


def _remeasure(invoices: list[Invoice], owners: dict[int, Contract]) -> dict[int, PeriodUsage]:
    """Each invoice's period usage now, with the metrics and price bounds its terms froze and only the
    exclusions made by its finalisation (later ones were credited by notes: never twice). One query per
    (period, finalisation instant): an invoice run finalises a period's invoices at one instant."""
    groups: dict[tuple[datetime, datetime, datetime | None], list[Invoice]] = defaultdict(list)
    for invoice in invoices:
        groups[(invoice.period_start, invoice.period_end, invoice.finalized_at)].append(invoice)
    measured: dict[int, PeriodUsage] = {}
    for (start, end, as_of), group in groups.items():
        meters = {}
        for invoice in group:
            terms = Terms.from_json(invoice.terms)
            contract = owners[invoice.contract_id]
            meters[invoice.pk] = ContractMeter(
                contract.tenant.code,
                contract.code,
                terms.metrics,
                terms.change_instants(start, end),
                events=terms.events,
            )
        usage = usage_by_contract(list(meters.values()), start, end, as_of=as_of)
        measured.update({pk: usage[meter.contract] for pk, meter in meters.items()})
    return measured


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


def _adjust(
    contract: Contract,
    invoice: Invoice,
    measured: PeriodUsage,
    earlier_adjustments: list[InvoiceLine],
    now: datetime,
) -> LateUsageFound:
    terms = Terms.from_json(invoice.terms)
    start, end = invoice.period_start, invoice.period_end
    billed = _billed(invoice, measured, earlier_adjustments)
    too_old = (
        contract.late_usage_policy == Contract.LateUsage.IGNORE_AFTER
        and invoice.finalized_at is not None
        and now - invoice.finalized_at > timedelta(days=contract.late_usage_days)
    )
    found = LateUsageFound([], [])
    for dimension, versions in terms.versions().items():
        late = measured.quantities.get(dimension, ZERO) - billed.quantities.get(dimension, ZERO)
        if late <= 0:
            continue
        additive = terms.additive(dimension)
        after = rate_versions(versions, measured, start, end, terms.currency, additive)
        before = rate_versions(versions, billed, start, end, terms.currency, additive)
        amount = sum((line.amount for line in after), ZERO) - sum((line.amount for line in before), ZERO)
        decision = LateUsage.Decision.IGNORED if too_old else LateUsage.Decision.ADJUSTED
        found.reports.append(
            LateUsage(
                invoice=invoice,
                dimension=dimension,
                quantity=late,
                amount=amount,
                decision=decision,
                detected_at=now,
            )
        )
        if too_old:
            continue
        details: dict[str, object] = {
            "period_start": start.isoformat(),
            "invoice": invoice.number,
            "rerated": _rerated(versions, billed, measured, start, end, additive),
        }
        if dimension in measured.events:
            details["events"] = _late_events(invoice, earlier_adjustments, dimension, measured)
        if measured.segments and len(measured.segments) == len(billed.segments):
            details["segments"] = [
                str(part.quantities.get(dimension, ZERO) - was.quantities.get(dimension, ZERO))
                for part, was in zip(measured.segments, billed.segments, strict=True)
            ]
        found.lines.append(
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
    if terms.catalogue is not None:
        late_tokens = _late_catalogue(contract, invoice, terms, earlier_adjustments, too_old, now)
        found.lines += late_tokens.lines
        found.reports += late_tokens.reports
    return found


def _late_events(
    invoice: Invoice, earlier_adjustments: list[InvoiceLine], unit: str, measured: PeriodUsage
) -> list[dict[str, object]]:
    """The business events of the unit that became billable since the invoice and its earlier
    adjustments billed theirs (a partial event that late records completed), each with its records."""
    lines = [*invoice.lines.filter(kind=InvoiceLine.Kind.USAGE, dimension=unit), *earlier_adjustments]
    billed = {e["event_id"] for x in lines if x.dimension == unit for e in x.details.get("events", [])}
    return [e.as_json() for e in measured.events[unit] if e.event_id not in billed]


def _rerated(
    versions: list[ChargeTerms],
    billed: PeriodUsage,
    measured: PeriodUsage,
    start: datetime,
    end: datetime,
    additive: bool,
) -> dict[str, Any]:
    """What an adjustment line re-rates, so that a verifier can redo it from the old invoice's pinned
    terms: the versions in effect, the quantities each priced before (`before`: billed so far) and
    after the late records, and the value a percentage charge takes (the same both times). The line's
    amount is the rating of `after` less the rating of `before` (`rate_versions`)."""
    before = version_quantities(versions, billed, start, end, additive)
    after = version_quantities(versions, measured, start, end, additive)
    return {
        "segmented": after.segmented,
        "versions": list(after.effective_from),
        "before": [str(q) for q in before.quantities],
        "after": [str(q) for q in after.quantities],
        "value": str(measured.values.get(versions[0].dimension, ZERO)),
    }


def _late_catalogue(
    contract: Contract,
    invoice: Invoice,
    terms: Terms,
    earlier_adjustments: list[InvoiceLine],
    too_old: bool,
    now: datetime,
) -> LateUsageFound:
    """Late tokens of a contract priced by the LLM price catalogue: per model, catalogue version and
    token kind, what the period's records cost now less what the invoice and earlier adjustments
    billed, as one adjustment line each; reported per dimension. Exclusions as of the finalisation."""
    start, end = invoice.period_start, invoice.period_end
    empty = PeriodUsage(0, {})
    current, usage = with_catalogue(contract, terms, empty, start, end, as_of=invoice.finalized_at)
    found = LateUsageFound([], [])
    if current.catalogue is None:
        return found
    billed: dict[tuple[str, str, str], list[Decimal]] = defaultdict(lambda: [ZERO, ZERO])
    for line in [*invoice.lines.filter(kind=InvoiceLine.Kind.USAGE), *earlier_adjustments]:
        if "catalogue" in line.details:
            listed = line.details["catalogue"]
            sums = billed[(listed["model_id"], listed["effective_from"], line.dimension)]
            sums[0] += Decimal(listed["tokens"])
            sums[1] += line.amount
    reported: dict[str, list[Decimal]] = defaultdict(lambda: [ZERO, ZERO])
    for charge in catalogue_charges(current.catalogue, usage.catalogue or (), terms.currency):
        tokens, amount = billed[(charge.model_id, charge.effective_from, charge.dimension)]
        late = charge.tokens - tokens
        if late <= 0:
            continue
        extra = charge.amount - amount
        reported[charge.dimension][0] += late / MILLION
        reported[charge.dimension][1] += extra
        if too_old:
            continue
        details = {
            "period_start": start.isoformat(),
            "invoice": invoice.number,
            "billed_before": {"tokens": str(tokens), "amount": str(amount)},
        }
        found.lines.append(
            RatedLine(
                dimension=charge.dimension,
                description=f"Late usage {start:%Y-%m} ({invoice.number}): {charge.description()}",
                quantity=late / MILLION,
                unit_price=charge.unit_price,
                amount=extra,
                kind="adjustment",
                details={**details, "catalogue": charge.details(current.catalogue.adjustment, int(late))},
            )
        )
    decision = LateUsage.Decision.IGNORED if too_old else LateUsage.Decision.ADJUSTED
    for dimension, (quantity, amount) in reported.items():
        found.reports.append(
            LateUsage(
                invoice=invoice,
                dimension=dimension,
                quantity=quantity,
                amount=amount,
                decision=decision,
                detected_at=now,
            )
        )
    return found
