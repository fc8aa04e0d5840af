"""The monthly SLA report as a plain HTML page (the portal issue styles it)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from .models import SlaReport
from .selectors import reports_for


@login_required
def report_page(request: HttpRequest, pk: int) -> HttpResponse:
    report = reports_for(request).filter(pk=pk).first()
    if report is None:
        raise Http404("No such SLA report.")
    return render(request, "sla/report.html", {"report": report, "chart": daily_chart(report)})


def daily_chart(report: SlaReport) -> list[dict[str, object]]:
    """Per day, each objective's percent (None without traffic) and a bar height in px for the page, in the
    order of the report's objectives (the column order). A day's counts are a JSON object keyed by
    objective name, and PostgreSQL's jsonb does not keep key order, so never iterate it."""
    names = [o["name"] for o in report.objectives]
    rows = []
    for day in report.daily:
        cells = []
        for name in names:
            percent = day["objectives"].get(name, {}).get("percent")
            cells.append(
                {"name": name, "percent": percent, "height": 0 if percent is None else round(float(percent))}
            )
        rows.append({"day": day["day"], "objectives": cells})
    return rows
