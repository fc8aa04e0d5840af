"""Monthly SLA reports (sla app), in the portal's look, with their PDF."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse

from accounts.access import Principal
from sla.views import daily_chart

from .. import selectors
from ..access import portal_view
from .common import page, paginate


@portal_view()
def report_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    reports = paginate(request, selectors.sla_reports(principal))
    return page(request, "frontend/sla_reports.html", principal, "sla", reports=reports)


@portal_view()
def report_detail(request: HttpRequest, principal: Principal, pk: int) -> HttpResponse:
    report = selectors.sla_reports(principal).filter(pk=pk).first()
    if report is None:
        raise Http404
    return page(
        request, "frontend/sla_report.html", principal, "sla", report=report, chart=daily_chart(report)
    )
