"""The monthly SLA report as a plain HTML page (the portal issue styles it)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from .selectors import reports_for


@login_required
def report_page(request: HttpRequest, pk: int) -> HttpResponse:
    report = reports_for(request).filter(pk=pk).first()
    if report is None:
        raise Http404("No such SLA report.")
    return render(request, "sla/report.html", {"report": report, "chart": daily_chart(report.daily)})


def daily_chart(daily: list[dict]) -> list[dict[str, object]]:
    """Per day, each objective's percent (None without traffic) and a bar height in px for the page."""
    rows = []
    for day in daily:
        cells = []
        for name, counts in day["objectives"].items():
            percent = counts["percent"]
            cells.append(
                {"name": name, "percent": percent, "height": 0 if percent is None else round(float(percent))}
            )
        rows.append({"day": day["day"], "objectives": cells})
    return rows
