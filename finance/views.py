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
from django.utils.translation import pgettext, pgettext_lazy
from django.views.decorators.http import require_GET, require_POST

from billing.disputes import line_left_to_credit, resolve_dispute
from billing.models import Dispute, Invoice
from common.errors import error_response
from common.periods import month_bounds, month_of, previous_month
from ledger.selectors import LedgerLookupError

from . import exports, filters, lifecycle, reports, scheduler
from .access import staff_required
from .reconciliation import ReconciliationFilter, unexplained
from .selectors import COST_GROUPS, REVENUE_GROUPS, SPLIT_GROUPS, InvoiceFilter
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
        period=filters.month(query, "month"),
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
    """The `month` filter's month, or the last closed month by default."""
    bounds = filters.month(query, "month")
    if bounds is not None:
        return (query.get("month") or "").strip(), bounds
    month = previous_month(month_of(now))
    return month, month_bounds(month)


def _costs(query: QueryDict, now: datetime) -> Report:
    month, (start, end) = _month_or_last(query, now)
    by = filters.choice(query, "by", COST_GROUPS) or "package"
    table = reports.costs(start, end, by)
    mixed = any(row["cost"] is None for row in table.rows)
    labels = [(key, reports.GROUP_LABELS[key]) for key in COST_GROUPS]
    return Report(table, {"period": month, "by": by, "group_labels": labels, "mixed_cost_currency": mixed})


def _cost_split(query: QueryDict, now: datetime) -> Report:
    month, (start, end) = _month_or_last(query, now)
    by = filters.choice(query, "by", SPLIT_GROUPS) or "layer"
    labels = list(reports.SPLIT_LABELS.items())
    return Report(reports.cost_split(start, end, by), {"period": month, "by": by, "group_labels": labels})


def _disputes(query: QueryDict, now: datetime) -> Report:
    status = filters.choice(query, "status", Dispute.Status.values)
    return Report(reports.disputes(status, now), {"status_labels": list(reports.DISPUTE_STATUS.items())})


def _reconciliation(query: QueryDict, now: datetime) -> Report:
    month, bounds = _month_or_last(query, now)
    selected = ReconciliationFilter(bounds, filters.code(query, "tenant"), filters.code(query, "contract"))
    table = reports.reconciliation(selected)
    return Report(table, {"period": month, "unexplained": unexplained([dict(row) for row in table.rows])})


def _packages(query: QueryDict, now: datetime) -> Report:
    period = filters.choice(query, "period", lifecycle.PERIODS) or "quarter"
    last = (query.get("to") or "").strip() if filters.month(query, "to") else month_of(now)
    first = (query.get("from") or "").strip() if filters.month(query, "from") else _months_before(last, 11)
    try:
        table = reports.package_lifecycle(period, first, last, now)
    except lifecycle.RangeError as error:
        raise filters.FilterError("invalid_filter", str(error), {"field": "from"}) from None
    flagged = sorted({row["package"] for row in table.rows if row["retirement"]})
    labels = list(reports.PERIOD_LABELS.items())
    context = {"period": period, "first": first, "last": last, "period_labels": labels, "flagged": flagged}
    charts = {"charts_available": scheduler.charts_available(), "echarts": scheduler.ECHARTS}
    chart = _calls_chart(table, period)
    return Report(table, {**context, **charts, "chart": chart, "retire_below": lifecycle.RETIRE_BELOW})


def _calls_chart(table: Table, period: str) -> dict[str, Any]:
    """Calls per package and period (a package's currency rows repeat its calls: taken once), with the
    retirement threshold where the periods are quarters."""
    periods = list(dict.fromkeys(row["period"] for row in table.rows))
    calls: dict[str, dict[str, int]] = {}
    for row in table.rows:
        calls.setdefault(row["package"], {})[row["period"]] = row["calls"]
    return {
        "periods": periods,
        "packages": [{"package": p, "calls": [c.get(x, 0) for x in periods]} for p, c in calls.items()],
        "threshold": lifecycle.RETIRE_BELOW if period == "quarter" else None,
        "threshold_label": pgettext("finance", "Retirement threshold"),
        "calls_label": pgettext("finance", "Calls"),
    }


def _months_before(month: str, count: int) -> str:
    for _ in range(count):
        month = previous_month(month)
    return month


def _scheduler(query: QueryDict, now: datetime) -> Report:
    table, context = scheduler.report_context(query)
    return Report(table, context)


@dataclass(frozen=True)
class ReportPage:
    """How a report is built, the template that shows it, and the query parameters it reads: any other
    parameter is refused (400 unknown_filter), never silently ignored."""

    build: Callable[[QueryDict, datetime], Report]
    template: str
    filters: tuple[str, ...]


REPORTS: dict[str, ReportPage] = {
    "invoices": ReportPage(_invoices, "finance/invoices.html", ("status", "tenant", "currency", "month")),
    "revenue": ReportPage(_revenue, "finance/revenue.html", ("by", "from", "to", "currency")),
    "costs": ReportPage(_costs, "finance/costs.html", ("month", "by")),
    "cost-split": ReportPage(_cost_split, "finance/cost_split.html", ("month", "by")),
    "disputes": ReportPage(_disputes, "finance/disputes.html", ("status",)),
    "reconciliation": ReportPage(
        _reconciliation, "finance/reconciliation.html", ("month", "tenant", "contract")
    ),
    "scheduler": ReportPage(_scheduler, "finance/scheduler.html", scheduler.FILTERS),
    "packages": ReportPage(_packages, "finance/packages.html", ("period", "from", "to")),
}


def _report(name: str, query: QueryDict, now: datetime) -> Report:
    """The named report for these filters; FilterError for a parameter it does not read or a bad value."""
    spec = REPORTS[name]
    filters.only(query, spec.filters)
    return spec.build(query, now)


@require_GET
@staff_required
def index(request: HttpRequest) -> HttpResponse:
    return render(request, "finance/index.html", {"section": "index"})


def _page(request: HttpRequest, name: str, status: int = 200, **extra: Any) -> HttpResponse:
    context: dict[str, Any] = {
        "section": name,
        "query": request.GET,
        "download_query": request.GET.urlencode(),
    }
    try:
        report = _report(name, request.GET, timezone.now())
    except filters.FilterError as error:
        return render(request, "finance/error.html", {**context, "error": error}, status=400)
    context = {**context, **report.context, "table": report.table, **extra}
    return render(request, REPORTS[name].template, context, status=status)


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
        try:
            table = _report(name, request.GET, timezone.now()).table
        except filters.FilterError as error:
            return error_response(error.http_status, error.code, error.message, error.details)
        render_file, content_type = exports.FORMATS[fmt]
        response = HttpResponse(render_file(table), content_type=content_type)
        response["Content-Disposition"] = f'attachment; filename="{table.name}.{fmt}"'
        return response

    view.__name__ = f"{name}_download"
    return view


DECISIONS = {
    "reject": pgettext_lazy("finance", "Reject: the evidence stands, nothing is credited"),
    "accept": pgettext_lazy("finance", "Accept: a credit note on the line"),
}


def _confirm(
    request: HttpRequest, pk: int, decision: str, amount: Decimal | None, comment: str
) -> HttpResponse:
    """What the decision will do, with a button that does it."""
    dispute = Dispute.objects.select_related("invoice", "line").filter(pk=pk).first()
    if dispute is None:
        raise Http404(f"No dispute {pk}.")
    if dispute.status != Dispute.Status.OPEN:
        already = pgettext("finance", "Dispute %(id)s is %(status)s.") % {
            "id": dispute.pk,
            "status": reports.DISPUTE_STATUS.get(dispute.status, dispute.status),
        }
        return _page(request, "disputes", 409, error=already)
    credit = amount if amount is not None else line_left_to_credit(dispute.line)
    context = {
        "section": "disputes",
        "dispute": dispute,
        "decision": decision,
        "decision_label": DECISIONS[decision],
        "amount": "" if amount is None else amount,
        "credit": credit,
        "comment": comment,
    }
    return render(request, "finance/resolve_confirm.html", context)


@require_POST
@staff_required
def resolve(request: HttpRequest, pk: int) -> HttpResponse:
    """The dispute queue's form: reject, or accept (in full, or for `amount`), through the ledger's
    own resolve service (the same one as POST /v1/ledger/disputes/<pk>/resolve). There is no default
    decision, and nothing is resolved before finance confirms what the decision does."""
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
    if decision not in DECISIONS:
        return _page(request, "disputes", 400, error=pgettext("finance", "Choose reject or accept."))
    comment = request.POST.get("comment", "")
    if request.POST.get("confirmed") != "1":
        return _confirm(request, pk, decision, amount, comment)
    try:
        dispute = resolve_dispute(request.user, pk, decision, comment, amount)
    except LedgerLookupError as error:
        return _page(request, "disputes", error.status, error=error.message)
    status = reports.DISPUTE_STATUS.get(dispute.status, dispute.status)
    messages.success(
        request, pgettext("finance", "Dispute %(id)s: %(status)s.") % {"id": dispute.pk, "status": status}
    )
    return redirect("finance:disputes", permanent=False)
