"""Monthly SLA reports (sla app), in the portal's look, with their PDF; the customer's watched
dependencies, the outages they had, and an appeal against one."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse

from accounts.access import WRITE_BILLING, Principal
from sla.services import AppealError, appeal_exclusion
from sla.views import daily_chart

from .. import selectors
from ..access import WRITE, portal_view
from .common import error_message, page, paginate

OUTAGES_SHOWN = 20


def _reports_page(
    request: HttpRequest, principal: Principal, status: int = 200, **extra: object
) -> HttpResponse:
    return page(
        request,
        "frontend/sla_reports.html",
        principal,
        "sla",
        status=status,
        reports=paginate(request, selectors.sla_reports(principal)),
        dependencies=selectors.dependencies(principal),
        outages=selectors.outages(principal)[:OUTAGES_SHOWN],
        can_appeal=principal.may_write(WRITE_BILLING) and not principal.is_staff,
        **extra,
    )


@portal_view()
def report_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    return _reports_page(request, principal)


@portal_view(WRITE_BILLING, WRITE)
def appeal_outage(request: HttpRequest, principal: Principal, pk: int) -> HttpResponse:
    """POST: appeal an outage (sla.services.appeal_exclusion), then back to the list at its row; the
    list again with the service's message when it cannot be opened."""
    if principal.is_staff:
        raise Http404
    try:
        appeal_exclusion(request.user, principal, pk, request.POST.get("reason", ""))  # type: ignore[arg-type]
    except AppealError as error:
        return _reports_page(
            request, principal, error.http_status, appeal_error=error_message(error), appeal_for=pk
        )
    return redirect(f"{reverse('portal-sla-reports')}#outage-{pk}")


@portal_view()
def report_detail(request: HttpRequest, principal: Principal, pk: int) -> HttpResponse:
    report = selectors.sla_reports(principal).filter(pk=pk).first()
    if report is None:
        raise Http404
    return page(
        request, "frontend/sla_report.html", principal, "sla", report=report, chart=daily_chart(report)
    )
