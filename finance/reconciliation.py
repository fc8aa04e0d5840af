"""Reconciliation: per finalised invoice and metered dimension, the usage the raw records hold in
ClickHouse against the quantity the invoice billed, with every difference put in a category.

    usage_total      the period's billable (status ok) records in the store now
  − late             of them, arrived after the invoice was finalised (`ingested_at`); what became of
                     them is billing.lateness's LateUsage (adjusted on a later invoice, or ignored)
  − excluded         left out when the invoice was rated: a ledger BillingExclusion or an SLA
                     customer-dependency pause (billing.exclusions) made before finalisation
  − unexplained      what no category accounts for: flagged, never absorbed
  = invoiced         the invoice's usage line
  − disputed         records a dispute excluded after finalisation (credited by its credit notes)
  − included_quota   the contract's free quantity, up to what is left
  = net_billable

One ClickHouse aggregate covers every invoice of the report (each record finds its invoice by
tenant, contract and period); PostgreSQL gives the lines, notes, exclusions and late-usage decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, cast

from billing.models import BillingExclusion, Invoice, InvoiceLine, LateUsage
from clickhouse_store.queries.billing import superseded_attempts
from clickhouse_store.queries.finance import (
    PARTS,
    BillingPause,
    ExcludedRecord,
    InvoicedPeriod,
    reconciliation_sums,
)
from pricing.dimensions import AGGREGATED_DIMENSIONS, quantity_from_aggregate
from sla.models import Exclusion
from treemeter_records.timeutil import unix_nanos

ZERO = Decimal(0)


@dataclass(frozen=True)
class ReconciliationFilter:
    period: tuple[datetime, datetime] | None = None
    tenant: str = ""
    contract: str = ""


def _invoices(selected: ReconciliationFilter) -> list[Invoice]:
    rows = Invoice.objects.filter(
        status__in=[Invoice.Status.FINALIZED, Invoice.Status.PAID], finalized_at__isnull=False
    )
    if selected.period is not None:
        rows = rows.filter(period_start__gte=selected.period[0], period_start__lt=selected.period[1])
    if selected.tenant:
        rows = rows.filter(tenant__code=selected.tenant)
    if selected.contract:
        rows = rows.filter(contract__code=selected.contract)
    return list(
        rows.select_related("tenant", "contract")
        .prefetch_related("lines__notes")
        .order_by("period_start", "tenant__code", "contract__code")
    )


def _rated_out(invoices: list[Invoice]) -> tuple[list[ExcludedRecord], list[BillingPause]]:
    """The ledger exclusions, retries' superseded attempts and customer-dependency pauses the invoices'
    periods may have rated out."""
    contracts = sorted({i.contract.code for i in invoices})
    start = min(i.period_start for i in invoices)
    end = max(i.period_end for i in invoices)
    excluded = BillingExclusion.objects.filter(
        contract__in=contracts, start_ns__gte=unix_nanos(start), start_ns__lt=unix_nanos(end)
    ).values_list("record_id", "created_at")
    pauses = Exclusion.objects.filter(
        contract__code__in=contracts,
        contract__pause_billing_on_customer_dependency=True,
        kind=Exclusion.Kind.CUSTOMER_DEPENDENCY,
        starts_at__lt=end,
        ends_at__gt=start,
    ).values_list("contract__code", "starts_at", "ends_at", "scope", "declared_at")
    owners = {i.contract.code: i.tenant.code for i in invoices}
    superseded = [  # a retry's superseded attempt is rated out from the retry's ingestion on
        ExcludedRecord(attempt.record_id, attempt.ingested_at)
        for attempt in superseded_attempts(contracts, start, end)
        if owners[attempt.contract] == attempt.tenant
    ]
    return (
        [ExcludedRecord(str(record_id), created) for record_id, created in excluded] + superseded,
        [
            BillingPause(code, starts, ends, scope == Exclusion.Scope.FAILED, declared)
            for code, starts, ends, scope, declared in pauses
        ],
    )


def measured(invoices: list[Invoice]) -> dict[int, dict[str, dict[str, Decimal]]]:
    """invoice id → part (usage_total, late, excluded, disputed) → dimension → quantity."""
    if not invoices:
        return {}
    periods = [
        InvoicedPeriod(
            tenant=i.tenant.code,
            contract=i.contract.code,
            start=i.period_start,
            end=i.period_end,
            finalized_at=cast(datetime, i.finalized_at),
        )
        for i in invoices
    ]
    sums = reconciliation_sums(periods, *_rated_out(invoices))
    return {
        invoices[position].pk: {
            part: {d: quantity_from_aggregate(d, raw) for d, raw in by_dimension.items()}
            for part, by_dimension in parts.items()
        }
        for position, parts in sums.items()
    }


def _late_decisions(invoices: list[Invoice]) -> dict[tuple[int, str], tuple[str, str]]:
    """(invoice, dimension) → billing.lateness's decision, and the invoice whose adjustment line billed
    the late usage (found by the adjustment lines' `details.invoice`: each, when late usage of one
    dimension was billed over several invoices)."""
    decided = LateUsage.objects.filter(invoice__in=invoices).values_list(
        "invoice_id", "dimension", "decision"
    )
    ids = {i.number: i.pk for i in invoices}
    adjustments = (
        InvoiceLine.objects.filter(kind=InvoiceLine.Kind.ADJUSTMENT, details__invoice__in=list(ids))
        .exclude(invoice__status=Invoice.Status.VOID)
        .values_list("details__invoice", "dimension", "invoice__number", "invoice_id")
        .order_by("invoice__period_start", "id")
    )
    billed_on: dict[tuple[int, str], list[str]] = {}
    for number, dimension, on_number, on_id in adjustments:
        billed_on.setdefault((ids[number], dimension), []).append(on_number or f"#{on_id}")
    return {(i, d): (decision, " ".join(billed_on.get((i, d), []))) for i, d, decision in decided}


def reconciliation_rows(selected: ReconciliationFilter) -> list[dict[str, Any]]:
    """One row per finalised invoice and built-in dimension it charges (custom metrics and outcomes
    are not measured from raw record columns alone and are left out). A dimension whose price changed
    within the period has several usage lines (one per version, and one for a period minimum or
    maximum): the row adds them up, as the period's usage covers them all."""
    invoices = _invoices(selected)
    usage = measured(invoices)
    decisions = _late_decisions(invoices)
    nothing = {d: ZERO for d in AGGREGATED_DIMENSIONS}
    rows = []
    for invoice in invoices:
        parts = usage.get(invoice.pk, dict.fromkeys(PARTS, nothing))
        included = {
            c["dimension"]: Decimal(c.get("included_quantity", "0")) for c in invoice.terms["charges"]
        }
        by_dimension: dict[str, list[InvoiceLine]] = {}
        for line in invoice.lines.all():
            if line.kind == "usage" and line.dimension in AGGREGATED_DIMENSIONS:
                by_dimension.setdefault(line.dimension, []).append(line)
        for d, lines in by_dimension.items():
            rows.append(
                _row(invoice, d, lines, {p: parts[p][d] for p in PARTS}, included.get(d, ZERO), decisions)
            )
    return rows


def _row(
    invoice: Invoice,
    dimension: str,
    lines: list[InvoiceLine],
    part: dict[str, Decimal],
    included: Decimal,
    decisions: dict[tuple[int, str], tuple[str, str]],
) -> dict[str, Any]:
    invoiced = sum((line.quantity for line in lines), ZERO)
    unexplained = part["usage_total"] - part["late"] - part["excluded"] - invoiced
    disputed = min(part["disputed"], invoiced)
    quota = min(included, invoiced - disputed)
    net = invoiced - disputed - quota
    amount = sum((line.amount for line in lines), Decimal("0.00"))
    credited = sum(
        (n.amount for line in lines for n in line.notes.all() if n.kind == "credit"), Decimal("0.00")
    )
    decision, billed_on = decisions.get((invoice.pk, dimension), ("pending" if part["late"] else "", ""))
    difference = part["usage_total"] - net
    return {
        "invoice_id": invoice.pk,
        "invoice_number": invoice.number,
        "tenant_code": invoice.tenant.code,
        "contract_code": invoice.contract.code,
        "month": f"{invoice.period_start.astimezone(UTC):%Y-%m}",
        "period_start": invoice.period_start,
        "period_end": invoice.period_end,
        "finalized_at": invoice.finalized_at,
        "dimension": dimension,
        "usage_total": part["usage_total"],
        "late": part["late"],
        "late_decision": decision,
        "late_billed_on": billed_on,
        "excluded": part["excluded"],
        "unexplained": unexplained,
        "invoiced": invoiced,
        "disputed": disputed,
        "included_quota": quota,
        "net_billable": net,
        "difference": difference,
        "currency": invoice.currency,
        "line_amount": amount,
        "credited": credited,
        "net_amount": amount - credited,
        "status": "unexplained" if unexplained else ("explained" if difference else "match"),
    }


def unexplained(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row for row in rows if row["status"] == "unexplained"]
