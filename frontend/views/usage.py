"""The usage dashboard: the page holds the filters and chart containers; the charts fetch their JSON
from /v1/usage/… with the same session cookie (frontend/static/frontend/charts.js)."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.staticfiles import finders
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.access import Principal
from pricing.dimensions import DIMENSION_NAMES
from usage.selectors import DIMENSIONS as USAGE_DIMENSIONS

from .. import labels, selectors
from ..access import portal_view
from .common import page

ECHARTS = "vendor/echarts/echarts.min.js"
DEFAULT_DAYS = 30


def charts_available() -> bool:
    """ECharts is installed by npm at build time; without it the page says so and shows no charts."""
    return finders.find(ECHARTS) is not None


@portal_view()
def dashboard(request: HttpRequest, principal: Principal) -> HttpResponse:
    today = timezone.now().date()
    contracts = selectors.contracts(principal)
    return page(
        request,
        "frontend/usage.html",
        principal,
        "usage",
        contracts=contracts,
        packages=sorted({c.package.code for c in contracts}),
        dimensions=[(code, labels.label(DIMENSION_NAMES, code)) for code in USAGE_DIMENSIONS],
        start=(today - timedelta(days=DEFAULT_DAYS - 1)).isoformat(),
        end=today.isoformat(),
        charts_available=charts_available(),
        echarts=ECHARTS,
        chart_text={
            "tokens": _("Tokens"),
            "layer": _("Layer"),
            "expert": _("Expert"),
            "avg_hops": _("Average hops"),
            "cache_hit_rate": _("Cache-hit rate"),
            "sla": _("SLA threshold"),
            "no_data": _("No usage in this range."),
            "failed": _("The figures could not be loaded."),
            "p99": _("P99 of your requests (ms)"),
            "objective": _("The subtree's P99 objective"),
            "queue": _("Wait in line (ms)"),
            "in_flight": _("Requests in flight"),
            "replicas": _("Desired replicas"),
            "borrow": _("Executors borrowed"),
            "return": _("Executors returned"),
            "count": _("Count"),
            # What the API answers in codes, named for the reader: dimensions, packages, latency layers.
            "dimensions": {code: str(labels.label(DIMENSION_NAMES, code)) for code in USAGE_DIMENSIONS},
            "packages": {c.package.code: c.package.name for c in contracts},
            "layers": {
                "L1": _("L1 decision"),
                "L2": _("L2 preparation"),
                "L3": _("L3 compute"),
                "total": _("Total"),
            },
        },
    )
