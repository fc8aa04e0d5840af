"""Reads behind the finance pages: plain functions returning rows (dicts keyed like the report columns).

Money is Decimal and never summed across currencies: every total is grouped by currency. Aggregates
run in the databases (GROUP BY), never as Python loops over usage records.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.db.models import Case, Count, F, IntegerField, Q, QuerySet, Sum, Value, When
from django.db.models.functions import TruncMonth

from billing.costs import cost_currency, cost_report, net_revenue_by, period_cost_split, revenue_invoices
from billing.models import Dispute, Invoice, Note
from common.money import round_money
from contracts.models import Contract

ZERO = Decimal("0.00")
# Group keys of the revenue report and the invoice fields behind them (`invoice__…` from a note).
REVENUE_GROUPS = {"month": "period_start", "package": "contract__package__code", "tenant": "tenant__code"}
COST_GROUPS = ("package", "tenant")
SPLIT_GROUPS = ("layer", "expert")


@dataclass(frozen=True)
class InvoiceFilter:
    status: str = ""
    tenant: str = ""
    currency: str = ""
    period: tuple[datetime, datetime] | None = None


def month_text(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%Y-%m}"


def invoices(selected: InvoiceFilter) -> QuerySet[Invoice]:
    rows = Invoice.objects.all()
    if selected.status:
        rows = rows.filter(status=selected.status)
    if selected.tenant:
        rows = rows.filter(tenant__code=selected.tenant)
    if selected.currency:
        rows = rows.filter(currency=selected.currency)
    if selected.period is not None:
        rows = rows.filter(period_start__gte=selected.period[0], period_start__lt=selected.period[1])
    return rows


def invoice_rows(selected: InvoiceFilter) -> list[dict[str, Any]]:
    rows = (
        invoices(selected)
        .order_by("-period_start", "tenant__code", "contract__code", "id")
        .values(
            "id",
            "number",
            "status",
            "currency",
            "period_start",
            "period_end",
            "subtotal",
            "tax",
            "total",
            "credits_applied",
            "credit_notes",
            "amount_due",
            "finalized_at",
            "paid_at",
            tenant_code=F("tenant__code"),
            contract_code=F("contract__code"),
            package_code=F("contract__package__code"),
        )
    )
    return [{**row, "month": month_text(row["period_start"])} for row in rows]


def invoice_totals(selected: InvoiceFilter) -> list[dict[str, Any]]:
    """Per currency, over the selected invoices except void ones (they bill nothing)."""
    return [
        dict(row)
        for row in invoices(selected)
        .exclude(status=Invoice.Status.VOID)
        .values("currency")
        .annotate(
            invoices=Count("id"),
            subtotal=Sum("subtotal"),
            tax=Sum("tax"),
            total=Sum("total"),
            credits_applied=Sum("credits_applied"),
            credit_notes=Sum("credit_notes"),
            amount_due=Sum("amount_due"),
        )
        .order_by("currency")
    ]


def _group_fields(by: Sequence[str], prefix: str = "") -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key in by:
        source = prefix + REVENUE_GROUPS[key]
        fields[f"g_{key}"] = TruncMonth(source, tzinfo=UTC) if key == "month" else F(source)
    fields["g_currency"] = F(prefix + "currency")
    return fields


def net_revenue(
    by: Sequence[str], start: datetime | None = None, end: datetime | None = None, currency: str = ""
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Per group (the `by` keys, then currency): finalised and paid invoices' subtotal (before tax),
    less their credit notes, plus their debit notes. A note counts in its invoice's month (the service
    month it corrects). Two aggregates (invoices, notes), so notes never multiply invoice sums."""
    selected = revenue_invoices(start, end, currency)
    keys = [*(f"g_{k}" for k in by), "g_currency"]
    billed = (
        selected.annotate(**_group_fields(by))
        .values(*keys)
        .annotate(invoices=Count("id"), invoiced=Sum("subtotal"))
    )
    notes = (
        Note.objects.filter(invoice__in=selected)
        .annotate(**_group_fields(by, "invoice__"))
        .values(*keys)
        .annotate(
            credit_notes=Sum("amount", filter=Q(kind=Note.Kind.CREDIT), default=ZERO),
            debit_notes=Sum("amount", filter=Q(kind=Note.Kind.DEBIT), default=ZERO),
        )
    )
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in billed:
        groups[tuple(row[k] for k in keys)] = {
            "invoices": row["invoices"],
            "invoiced": row["invoiced"],
            "credit_notes": ZERO,
            "debit_notes": ZERO,
        }
    for row in notes:
        figures = groups[tuple(row[k] for k in keys)]
        figures["credit_notes"], figures["debit_notes"] = row["credit_notes"], row["debit_notes"]
    for figures in groups.values():
        figures["net_revenue"] = figures["invoiced"] - figures["credit_notes"] + figures["debit_notes"]
    return groups


def revenue_rows(
    by: Sequence[str], start: datetime | None = None, end: datetime | None = None, currency: str = ""
) -> list[dict[str, Any]]:
    """Revenue rows grouped by `by` (of month, package, tenant) and always by currency."""
    rows = []
    for group, figures in net_revenue(by, start, end, currency).items():
        named = dict(zip([*by, "currency"], group, strict=True))
        if "month" in named:
            named["month"] = month_text(named["month"])
        rows.append({**named, **figures})
    return sorted(rows, key=lambda r: tuple(str(r[k]) for k in [*by, "currency"]))


def cost_rows(start: datetime, end: datetime, by: str) -> list[dict[str, Any]]:
    """Cost (billing.costs, per contract) and net revenue per package or tenant, and per the contracts'
    currency. A contract's cost goes to its own currency's row, so no row adds currencies; a margin is
    given only where the costs are in that same currency and every request's cost is known."""
    per_contract = {row.key: row for row in cost_report(start, end, by="contract")}
    revenue = net_revenue_by("contract__code", start, end)
    codes = set(per_contract) | {code for code, _ in revenue}
    owners: dict[str, dict[str, Any]] = {
        c["code"]: dict(c)
        for c in Contract.objects.filter(code__in=codes).values(
            "code", "currency", package_code=F("package__code"), tenant_code=F("tenant__code")
        )
    }
    costs_in = cost_currency()
    rows: dict[tuple[str, str], dict[str, Any]] = defaultdict(
        lambda: {
            "requests": 0,
            "unpriced_requests": 0,
            "raw_cost": Decimal(0),
            "raw_loan_cost": Decimal(0),
            "revenue": ZERO,
        }
    )
    for code in codes:
        owner = owners.get(code, {"currency": "", "package_code": "", "tenant_code": ""})
        key = owner[f"{by}_code"]
        for currency in {owner["currency"]} | {c for k, c in revenue if k == code}:
            row = rows[(key, currency)]
            row["revenue"] += revenue.get((code, currency), ZERO)
            if currency == owner["currency"] and code in per_contract:
                cost = per_contract[code]
                row["requests"] += cost.requests
                row["unpriced_requests"] += cost.unpriced_requests
                row["raw_cost"] += cost.cost
                row["raw_loan_cost"] += cost.loan_cost
    return [_margin(by, key, currency, row, costs_in) for (key, currency), row in sorted(rows.items())]


def _margin(by: str, key: str, currency: str, row: dict[str, Any], costs_in: str | None) -> dict[str, Any]:
    priced = row["requests"] - row["unpriced_requests"]
    comparable = costs_in == currency and not row["unpriced_requests"] and row["revenue"] > 0
    cost = round_money(row["raw_cost"], costs_in) if costs_in else None
    return {
        by: key,
        "currency": currency,
        "requests": row["requests"],
        "unpriced_requests": row["unpriced_requests"],
        "cost": cost,
        "loan_cost": round_money(row["raw_loan_cost"], costs_in) if costs_in else None,
        "cost_currency": costs_in or "",
        "cost_per_request": (row["raw_cost"] / priced).quantize(Decimal("1E-6"))
        if priced and costs_in
        else None,
        "revenue": row["revenue"],
        "gross_margin": ((row["revenue"] - row["raw_cost"]) / row["revenue"]).quantize(Decimal("1E-4"))
        if comparable
        else None,
    }


def dispute_rows(status: str, now: datetime) -> list[dict[str, Any]]:
    """The dispute queue: open disputes first, oldest first within each status."""
    rows = Dispute.objects.all()
    if status:
        rows = rows.filter(status=status)
    ordered = rows.annotate(
        queue=Case(
            When(status=Dispute.Status.OPEN, then=Value(0)), default=Value(1), output_field=IntegerField()
        )
    ).order_by("queue", "opened_at", "id")
    found = ordered.values(
        "id",
        "status",
        "reason",
        "credited",
        "opened_at",
        "invoice_id",
        "line_id",
        tenant_code=F("tenant__code"),
        invoice_number=F("invoice__number"),
        currency=F("invoice__currency"),
        line_dimension=F("line__dimension"),
        line_description=F("line__description"),
        line_amount=F("line__amount"),
        credit_note_number=F("credit_note__number"),
    )
    return [
        {**row, "age_days": (now - row["opened_at"]).days, "credit_note": row["credit_note_number"] or ""}
        for row in found
    ]


def cost_split_rows(start: datetime, end: datetime, by: str) -> list[dict[str, Any]]:
    """The period's cost split by layer or by expert (billing.costs.period_cost_split), each row with
    its requests, cost and the cost's currency; no rows while the cost profiles use several currencies."""
    split = period_cost_split(start, end)
    if split is None:
        return []
    rows = split.by_layer if by == "layer" else split.by_expert
    total = {"part": "total", "requests": split.requests, "cost": split.total, "currency": split.currency}
    return [
        *({"part": r.key, "requests": r.requests, "cost": r.cost, "currency": split.currency} for r in rows),
        total,
    ]
