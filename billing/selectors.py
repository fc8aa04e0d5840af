"""Reads for billing: usage aggregates from ClickHouse, invoices from PostgreSQL.

Rating is one aggregate query (`clickhouse_store.queries.billing.usage_rows`): every contract of an
invoice run and every dimension and custom metric in one GROUP BY over the deduplicated records; never
a Python loop over records. A contract whose prices change within the period is also grouped by price
segment, still in that one query.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet, Sum

from accounts.access import Principal, scoped
from clickhouse_store.queries.billing import RatedContract, UsageRow, catalogue_days, usage_rows
from ledger.models import Checkpoint
from pricing.dimensions import (
    AGGREGATED_DIMENSIONS,
    CHARGE_GROUP_NAMES,
    CHARGE_GROUPS,
    OTHER_USAGE,
    quantity_from_aggregate,
)
from pricing.expressions import Metric, parse_metric

from .business_events import BILLABLE, measure_events
from .exclusions import rating_exclusions
from .models import CreditEntry, Invoice, Note, Outcome
from .rating import BilledEvent, PeriodUsage, SegmentUsage
from .terms import EventTerms

METRIC_PLACES = Decimal("0.000001")


@dataclass(frozen=True)
class ContractMeter:
    """What to measure for one contract: its tenant and code, its custom metric expressions, the
    instants inside the period where a price changes (usage is then also measured per segment), and
    whether its tokens are priced by the LLM price catalogue (then also measured per model and day)."""

    tenant: str
    contract: str
    metrics: dict[str, str]
    bounds: tuple[datetime, ...] = ()
    catalogue: bool = False
    events: dict[str, EventTerms] = field(default_factory=dict)  # business-event units it prices


def rated_contracts(meters: Sequence[ContractMeter]) -> list[RatedContract]:
    """The rating query's contracts, each custom metric expression parsed once (TermsError if one is
    not in the grammar)."""
    parsed: dict[str, Metric] = {}
    for meter in meters:
        for expression in meter.metrics.values():
            if expression not in parsed:
                parsed[expression] = parse_metric(expression)
    return [
        RatedContract(m.tenant, m.contract, tuple(parsed[e] for e in m.metrics.values()), m.bounds)
        for m in meters
    ]


def usage_by_contract(
    meters: Sequence[ContractMeter],
    start: datetime,
    end: datetime,
    as_of: datetime | None = None,
    *,
    sandbox: bool = False,
    packages: Sequence[str] = (),
) -> dict[str, PeriodUsage]:
    """Each contract's period usage (only successful, not excluded requests are billable; record_count
    counts all), and per price segment for a meter with bounds; per model and day for a meter priced by
    the catalogue (one more query for all of them). A contract without records gets zero
    usage. Records under another tenant's code are not counted. `as_of`: only exclusions made by then
    apply (`billing.exclusions`). `sandbox`: measured from the customer sandboxes' records (a sandbox's
    projected invoice), which no other reading ever sees; `packages`: only the records made under these."""
    if not meters:
        return {}
    owner = {m.contract: m.tenant for m in meters}
    exclusions = rating_exclusions(owner, start, end, as_of)
    found: dict[str, dict[int, UsageRow]] = {}
    priced = [(m.tenant, m.contract) for m in meters if m.catalogue]
    days = catalogue_days(priced, start, end, exclusions.excluded(), sandbox=sandbox) if priced else {}
    rated = rated_contracts(meters)
    for row in usage_rows(rated, start, end, exclusions.excluded(), sandbox=sandbox, packages=packages):
        if owner.get(row.contract) == row.tenant:
            found.setdefault(row.contract, {})[row.segment] = row
    usage = {}
    for meter in meters:
        by_segment = found.get(meter.contract, {})
        total = _summed(list(by_segment.values()))
        edges = [start, *meter.bounds, end]
        segments = tuple(
            SegmentUsage(edges[k], edges[k + 1], _quantities(meter, by_segment.get(k)))
            for k in range(len(meter.bounds) + 1)
        )
        excluded = exclusions.describe(
            meter.contract,
            total.by_dispute if total else 0,
            total.by_pause if total else 0,
            total.by_retry if total else 0,
        )
        usage[meter.contract] = PeriodUsage(
            total.records if total else 0,
            _quantities(meter, total),
            excluded=excluded,
            segments=segments if meter.bounds else (),
            catalogue=tuple(days[(meter.tenant, meter.contract)]) if meter.catalogue else None,
        )
        if meter.events:
            usage[meter.contract] = _with_events(meter, usage[meter.contract], start, end, sandbox)
    return usage


def _with_events(
    meter: ContractMeter, usage: PeriodUsage, start: datetime, end: datetime, sandbox: bool
) -> PeriodUsage:
    """The usage plus, per business-event unit, its billable events: their count is the unit's quantity
    (in each price segment, those that started in it)."""
    measured = measure_events(
        meter.tenant, meter.contract, start, end, list(meter.events.values()), sandbox=sandbox
    )
    units = {terms.package: unit for unit, terms in meter.events.items()}
    billed: dict[str, list[BilledEvent]] = {unit: [] for unit in meter.events}
    for event in measured:
        if event.status == BILLABLE:
            records = tuple(r.record_id for r in event.records)
            billed[units[event.package]].append(BilledEvent(event.event_id, records, event.started))
    counts = {unit: Decimal(len(events)) for unit, events in billed.items()}
    segments = tuple(
        replace(
            segment,
            quantities={
                **segment.quantities,
                **{
                    unit: Decimal(sum(segment.start <= e.started < segment.end for e in events))
                    for unit, events in billed.items()
                },
            },
        )
        for segment in usage.segments
    )
    return replace(
        usage,
        quantities={**usage.quantities, **counts},
        segments=segments,
        events={unit: tuple(events) for unit, events in billed.items()},
    )


def _summed(rows: list[UsageRow]) -> UsageRow | None:
    """One contract's segment rows added up; a metric that does not add up (a period max, …) takes its
    whole period's value, which the query gives each segment with billable records."""
    if len(rows) <= 1:
        return rows[0] if rows else None
    first = rows[0]
    period = next((row.period_metrics for row in rows if row.period_metrics), {})
    return UsageRow(
        first.tenant,
        first.contract,
        0,
        sum(row.records for row in rows),
        sum(row.by_dispute for row in rows),
        sum(row.by_pause for row in rows),
        sum(row.by_retry for row in rows),
        {d: sum(row.aggregates[d] for row in rows) for d in first.aggregates},
        {
            e: period[e] if e in period else sum((row.metrics[e] for row in rows), Decimal(0))
            for e in first.metrics
        },
        period,
    )


def _quantities(meter: ContractMeter, row: UsageRow | None) -> dict[str, Decimal]:
    quantities = {
        d: quantity_from_aggregate(d, row.aggregates[d] if row else 0) for d in AGGREGATED_DIMENSIONS
    }
    for code, expression in meter.metrics.items():
        raw = row.metrics[expression] if row else 0
        quantities[code] = Decimal(raw).quantize(METRIC_PLACES)
    return quantities


def period_usage(
    tenant: str,
    contract: str,
    start: datetime,
    end: datetime,
    metrics: dict[str, str] | None = None,
    as_of: datetime | None = None,
    bounds: tuple[datetime, ...] = (),
    events: dict[str, EventTerms] | None = None,
) -> PeriodUsage:
    """One contract's usage for [start, end), also per price segment when `bounds` are given, and its
    business events of these units."""
    meter = ContractMeter(tenant, contract, metrics or {}, bounds, events=events or {})
    return usage_by_contract([meter], start, end, as_of)[contract]


def invoice_with_lines(invoice_id: int) -> Invoice:
    return (
        Invoice.objects.select_related("contract", "tenant", "contract__package")
        .prefetch_related("lines", "notes")
        .get(pk=invoice_id)
    )


def visible_invoices(principal: Principal) -> QuerySet[Invoice]:
    """The invoices the principal sees."""
    return scoped(Invoice.objects.select_related("contract", "tenant"), principal)


def visible_credit_notes(principal: Principal) -> QuerySet[Note]:
    notes = Note.objects.filter(kind=Note.Kind.CREDIT).select_related("invoice__contract")
    return scoped(notes, principal, "invoice__tenant")


def visible_outcomes(principal: Principal) -> QuerySet[Outcome]:
    outcomes = Outcome.objects.select_related("contract", "credit_note")
    return scoped(outcomes, principal, "contract__tenant")


def credit_balance(contract_id: int) -> Decimal:
    total = CreditEntry.objects.filter(contract_id=contract_id).aggregate(total=Sum("amount"))["total"]
    return total if total is not None else Decimal("0.00")


def latest_checkpoint() -> dict[str, Any] | None:
    """The newest signed ledger checkpoint (size and root), which a finalised invoice pins; None while
    the ledger has published none."""
    checkpoint = Checkpoint.objects.order_by("-size", "-id").first()
    if checkpoint is None:
        return None
    return {"size": checkpoint.size, "root_hash": base64.b64encode(bytes(checkpoint.root_hash)).decode()}


@dataclass(frozen=True)
class ChargeGroup:
    """One group of an invoice's usage charges (`pricing.dimensions.CHARGE_GROUPS`) and its amount."""

    group: str
    amount: Decimal


def charge_groups(invoice: Invoice) -> list[ChargeGroup]:
    """The invoice's usage lines (late-usage adjustments included) added up per charge group, in
    presentation order; groups without a line are left out. Every page, PDF and API answer of the
    invoice shows these."""
    totals: dict[str, Decimal] = {}
    for line in invoice.lines.all():
        if line.kind in ("usage", "adjustment"):
            group = CHARGE_GROUPS.get(line.dimension, OTHER_USAGE)
            totals[group] = totals.get(group, Decimal(0)) + line.amount
    return [ChargeGroup(g, totals[g]) for g in CHARGE_GROUP_NAMES if g in totals]


@dataclass(frozen=True)
class TaxRow:
    """One tax of an invoice: its code, name and rate, the amounts of the lines it applies to (as priced:
    with the tax in them when the contract's prices include it) and the tax."""

    code: str
    name: str
    rate: Decimal
    base: Decimal
    amount: Decimal


def tax_breakdown(invoice: Invoice) -> list[TaxRow]:
    """The invoice's tax by rate, adding up to `invoice.tax`: per tax of its frozen terms, from the
    lines' own taxes (billing.taxes); an invoice with a single `tax_rate` has one row on its subtotal."""
    taxes = invoice.terms.get("taxes") or []
    if not taxes:
        rate = Decimal(invoice.terms.get("tax_rate", "0"))
        return [TaxRow("tax", "Tax", rate, invoice.subtotal, invoice.tax)] if rate or invoice.tax else []
    rows = []
    lines = list(invoice.lines.all())
    for tax in taxes:
        base = amount = Decimal(0)
        for line in lines:
            for found in line.details.get("taxes", []):
                if found["code"] == tax["code"]:
                    base += line.amount
                    amount += Decimal(found["amount"])
        rows.append(TaxRow(tax["code"], tax["name"], Decimal(tax["rate"]), base, amount))
    return rows
