"""Finance pages for platform staff: each report as a page and as CSV or Parquet downloads of the
same table. Thin: filters are parsed by `filters`, tables built by `reports`, files by `exports`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import pgettext
from django.views.decorators.http import require_GET, require_POST

from billing.disputes import resolve_dispute
from billing.models import Dispute, Invoice
from common.errors import error_response
from common.periods import month_bounds, month_of, previous_month
from ledger.selectors import LedgerLookupError

from . import exports, filters, reports
from .access import staff_required
from .reconciliation import ReconciliationFilter, unexplained
from .selectors import COST_GROUPS, REVENUE_GROUPS, InvoiceFilter
from .tables import Table


@dataclass(frozen=True)
class Report:
    """A page's main table (the one its downloads export), and what else the page shows."""

    table: Table
    context: dict[str, Any] = field(default_factory=dict)


def _invoices(query: QueryDict, now: datetime) -> Report:
    selected = InvoiceFilter(
        status=filters.choice(query, "status", Invoice.Status.values),
        tenant=filters.code(query, "tenant"),
        currency=filters.currency(query),
        period=filters.month(query, "period"),
    )
    return Report(
        reports.invoices(selected),
        {"totals": reports.invoice_totals(selected), "status_labels": list(reports.INVOICE_STATUS.items())},
    )


def _revenue(query: QueryDict, now: datetime) -> Report:
    by = filters.choices(query, "by", list(REVENUE_GROUPS), default=list(REVENUE_GROUPS))
    first, last = filters.month(query, "from"), filters.month(query, "to")
    table = reports.revenue(
        by, first[0] if first else None, last[1] if last else None, filters.currency(query)
    )
    labels = [(key, reports.GROUP_LABELS[key]) for key in REVENUE_GROUPS]
    return Report(table, {"by": by, "group_labels": labels})


def _month_or_last(query: QueryDict, now: datetime) -> tuple[str, tuple[datetime, datetime]]:
    """The `period` filter's month, or the last closed month by default."""
    bounds = filters.month(query, "period")
    if bounds is not None:
        return (query.get("period") or "").strip(), bounds
    month = previous_month(month_of(now))
    return month, month_bounds(month)


def _costs(query: QueryDict, now: datetime) -> Report:
    month, (start, end) = _month_or_last(query, now)
    by = filters.choice(query, "by", COST_GROUPS) or "package"
    table = reports.costs(start, end, by)
    mixed = any(row["cost"] is None for row in table.rows)
    labels = [(key, reports.GROUP_LABELS[key]) for key in COST_GROUPS]
    return Report(table, {"period": month, "by": by, "group_labels": labels, "mixed_cost_currency": mixed})


def _disputes(query: QueryDict, now: datetime) -> Report:
    status = filters.choice(query, "status", Dispute.Status.values)
    return Report(reports.disputes(status, now), {"status_labels": list(reports.DISPUTE_STATUS.items())})


def _reconciliation(query: QueryDict, now: datetime) -> Report:
    month, bounds = _month_or_last(query, now)
    selected = ReconciliationFilter(bounds, filters.code(query, "tenant"), filters.code(query, "contract"))
    table = reports.reconciliation(selected)
    return Report(table, {"period": month, "unexplained": unexplained([dict(row) for row in table.rows])})


REPORTS: dict[str, tuple[Callable[[QueryDict, datetime], Report], str]] = {
    "invoices": (_invoices, "finance/invoices.html"),
    "revenue": (_revenue, "finance/revenue.html"),
    "costs": (_costs, "finance/costs.html"),
    "disputes": (_disputes, "finance/disputes.html"),
    "reconciliation": (_reconciliation, "finance/reconciliation.html"),
}


@require_GET
@staff_required
def index(request: HttpRequest) -> HttpResponse:
    return render(request, "finance/index.html", {"section": "index"})


def _page(request: HttpRequest, name: str, status: int = 200, **extra: Any) -> HttpResponse:
    build, template = REPORTS[name]
    context: dict[str, Any] = {
        "section": name,
        "query": request.GET,
        "download_query": request.GET.urlencode(),
    }
    try:
        report = build(request.GET, timezone.now())
    except filters.FilterError as error:
        return render(request, "finance/error.html", {**context, "error": error}, status=400)
    return render(
        request, template, {**context, **report.context, "table": report.table, **extra}, status=status
    )


def page_view(name: str) -> Callable[[HttpRequest], HttpResponse]:
    @require_GET
    @staff_required
    def view(request: HttpRequest) -> HttpResponse:
        return _page(request, name)

    view.__name__ = f"{name}_page"
    return view


def download_view(name: str) -> Callable[[HttpRequest, str], HttpResponse]:
    @require_GET
    @staff_required
    def view(request: HttpRequest, fmt: str) -> HttpResponse:
        if fmt not in exports.FORMATS:
            raise Http404(f"No {fmt} download.")
        build, _template = REPORTS[name]
        try:
            table = build(request.GET, timezone.now()).table
        except filters.FilterError as error:
            return error_response(error.http_status, error.code, error.message, error.details)
        render_file, content_type = exports.FORMATS[fmt]
        response = HttpResponse(render_file(table), content_type=content_type)
        response["Content-Disposition"] = f'attachment; filename="{table.name}.{fmt}"'
        return response

    view.__name__ = f"{name}_download"
    return view


@require_POST
@staff_required
def resolve(request: HttpRequest, pk: int) -> HttpResponse:
    """The dispute queue's form: reject, or accept (in full, or for `amount`), through the ledger's
    own resolve service (the same one as POST /v1/ledger/disputes/<pk>/resolve)."""
    raw = request.POST.get("amount", "").strip()
    try:
        amount = Decimal(raw) if raw else None
        if amount is not None and not amount.is_finite():
            raise InvalidOperation
    except InvalidOperation:
        return _page(
            request, "disputes", 400, error=pgettext("finance", "The amount must be a decimal number.")
        )
    decision = request.POST.get("decision", "")
    if decision not in ("reject", "accept"):
        return _page(request, "disputes", 400, error=pgettext("finance", "Choose reject or accept."))
    try:
        dispute = resolve_dispute(request.user, pk, decision, request.POST.get("comment", ""), amount)
    except LedgerLookupError as error:
        return _page(request, "disputes", error.status, error=error.message)
    status = reports.DISPUTE_STATUS.get(dispute.status, dispute.status)
    messages.success(
        request, pgettext("finance", "Dispute %(id)s: %(status)s.") % {"id": dispute.pk, "status": status}
    )
    return redirect("finance:disputes", permanent=False)
