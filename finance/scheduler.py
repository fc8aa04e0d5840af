"""The scheduler page: the routers' scheduler events (scheduling.selectors) as a paginated table, newest
first, and the charts' figures per subtree. Every number shown comes from the stored events or the
records: the desired replicas of each scaling step (``figures["desired"]``), the executors of each
borrow and return (``figures["executors"]``, or the executor ids it names), the P99 objective the router
sent with its events (``figures["sla_p99_ms"]``), and per time bucket the P99 latency, the requests in
flight and the wait in line of the records decided for the subtree
(clickhouse_store.queries.scheduling)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.contrib.staticfiles import finders
from django.core.paginator import Paginator
from django.http import QueryDict
from django.utils import timezone
from django.utils.translation import pgettext, pgettext_lazy

from clickhouse_store.queries.scheduling import subtree_timeline
from clickhouse_store.queries.usage import UsageScope
from scheduling.models import SchedulerEvent
from scheduling.selectors import EventFilter, chart_events, scheduler_events, timeline_bucket_s

from . import filters
from .tables import Column, Table

PAGE_SIZE = 50
CHART_MAX = 2000  # the newest events a chart draws; older ones are left out, and the page says so
ECHARTS = "vendor/echarts/echarts.min.js"  # as the portal's usage page: installed by npm at build time
FILTERS = ("subtree", "kind", "from", "to", "page")
DAY = re.compile(r"^\d{4}-\d{2}-\d{2}\Z", re.ASCII)
TIMELINE_DEFAULT = timedelta(hours=24)  # without from/to: the last day

KIND_LABELS = {
    SchedulerEvent.Kind.BORROW.value: pgettext_lazy("finance", "Borrow"),
    SchedulerEvent.Kind.RETURN.value: pgettext_lazy("finance", "Return"),
    SchedulerEvent.Kind.SCALE_UP.value: pgettext_lazy("finance", "Scale up"),
    SchedulerEvent.Kind.SCALE_DOWN.value: pgettext_lazy("finance", "Scale down"),
}
COLUMNS = (
    Column("at", pgettext_lazy("finance", "Time (UTC)"), "timestamp"),
    Column("kind", pgettext_lazy("finance", "Event"), labels=KIND_LABELS),
    Column("subtree", pgettext_lazy("finance", "Subtree")),
    Column("executor", pgettext_lazy("finance", "Executors")),
    Column("lender", pgettext_lazy("finance", "Lender")),
    Column("figures", pgettext_lazy("finance", "Figures")),
    Column("reason", pgettext_lazy("finance", "Reason")),
    Column("router", pgettext_lazy("finance", "Router")),
    Column("event_id", pgettext_lazy("finance", "Event ID")),
    Column("received_at", pgettext_lazy("finance", "Received at"), "timestamp"),
)


def charts_available() -> bool:
    """ECharts is installed by npm at build time; without it the page says charts are off."""
    return finders.find(ECHARTS) is not None


def _day(query: QueryDict, name: str) -> date | None:
    raw = (query.get(name) or "").strip()
    if not raw:
        return None
    try:
        if DAY.match(raw) is None:
            raise ValueError(raw)
        return date.fromisoformat(raw)
    except ValueError:
        raise filters.FilterError(
            "invalid_filter", f"{name} must be a day, YYYY-MM-DD.", {"field": name, "value": raw[:64]}
        ) from None


def event_filter(query: QueryDict) -> EventFilter:
    """The page's filters: ``subtree``, ``kind``, and the days ``from`` and ``to`` (UTC, both included)."""
    first, last = _day(query, "from"), _day(query, "to")
    if first is not None and last is not None and first > last:
        raise filters.FilterError(
            "invalid_filter", "from must not be after to.", {"field": "to", "value": last.isoformat()}
        )
    return EventFilter(
        subtree=filters.code(query, "subtree"),
        kind=filters.choice(query, "kind", SchedulerEvent.Kind.values),
        start=None if first is None else datetime.combine(first, time(), UTC),
        end=None if last is None else datetime.combine(last + timedelta(days=1), time(), UTC),
    )


def page_number(query: QueryDict) -> int:
    raw = (query.get("page") or "").strip()
    if not raw:
        return 1
    if not raw.isascii() or not raw.isdigit() or len(raw) > 9 or int(raw) < 1:
        raise filters.FilterError(
            "invalid_filter", "page must be a positive whole number.", {"field": "page", "value": raw[:64]}
        )
    return int(raw)


def _figures_text(figures: dict[str, Any]) -> str:
    return ", ".join(f"{name}={figures[name]}" for name in sorted(figures))


def _row(event: SchedulerEvent) -> dict[str, Any]:
    return {
        "id": event.pk,
        "at": event.at,
        "kind": event.kind,
        "subtree": event.subtree,
        "executor": event.executor,
        "lender": event.lender,
        "figures": _figures_text(event.figures),
        "reason": event.reason,
        "router": event.router.agent_id,
        "event_id": str(event.event_id),
        "received_at": event.received_at,
    }


@dataclass(frozen=True)
class Pager:
    number: int
    pages: int
    count: int
    previous_query: str | None  # the query string of the previous page, None on the first
    next_query: str | None


def _page_query(query: QueryDict, number: int) -> str:
    other = query.copy()
    other["page"] = str(number)
    return other.urlencode()


def events_table(query: QueryDict, selected: EventFilter) -> tuple[Table, Pager]:
    """One page of the matching events, newest first, and where it sits among the pages."""
    page = Paginator(scheduler_events(selected), PAGE_SIZE).get_page(page_number(query))
    pager = Pager(
        number=page.number,
        pages=page.paginator.num_pages,
        count=page.paginator.count,
        previous_query=_page_query(query, page.number - 1) if page.has_previous() else None,
        next_query=_page_query(query, page.number + 1) if page.has_next() else None,
    )
    return Table("finance-scheduler", COLUMNS, [_row(event) for event in page.object_list]), pager


def timeline_window(selected: EventFilter, now: datetime) -> tuple[datetime, datetime, int]:
    """The records' window (the page's days, or the last day) and its bucket in seconds."""
    end = selected.end or now
    start = selected.start or end - TIMELINE_DEFAULT
    return start, end, timeline_bucket_s(start, end)


def chart(selected: EventFilter, now: datetime) -> dict[str, Any]:
    """Per subtree, in time order: ``desired`` [ms, replicas, kind] of each scaling step, ``borrow`` and
    ``return`` [ms, executors, lender, executor ids] of each move, ``service`` [ms, P99 ms, requests in
    flight, wait in line ms, answers] per bucket of its records, and ``sla_p99_ms``, the objective its
    router last sent (None: none sent). Times are Unix milliseconds (UTC)."""
    events, truncated = chart_events(selected, CHART_MAX)
    subtrees: dict[str, dict[str, Any]] = {}

    def series(name: str) -> dict[str, Any]:
        empty: dict[str, Any] = {"desired": [], "borrow": [], "return": [], "service": [], "sla_p99_ms": None}
        return subtrees.setdefault(name, empty)

    for event in events:
        found = series(event.subtree)
        if event.sla_p99_ms is not None:
            found["sla_p99_ms"] = event.sla_p99_ms
        at_ms = event.at_ns // 1_000_000
        if event.kind in SchedulerEvent.SCALING:
            if event.desired_replicas is not None:
                found["desired"].append([at_ms, event.desired_replicas, event.kind])
            continue
        found[event.kind].append([at_ms, event.executors_moved, event.lender, event.executor])
    start, end, bucket_s = timeline_window(selected, now)
    for row in subtree_timeline(UsageScope(tenant=None, start=start, end=end), bucket_s):
        if selected.subtree and row.subtree != selected.subtree:
            continue
        at_ms = int(row.start.timestamp() * 1000)
        values = [round(row.p99_ms, 1), round(row.in_flight, 3), round(row.queue_ms, 1), row.answers]
        series(row.subtree)["service"].append([at_ms, *values])
    return {
        "subtrees": [{"subtree": name, **found} for name, found in sorted(subtrees.items())],
        "truncated": truncated,
        "limit": CHART_MAX,
        "bucket_s": bucket_s,
    }


def chart_text() -> dict[str, str]:
    return {
        "desired": pgettext("finance", "Desired replicas"),
        "executors": pgettext("finance", "Executors moved"),
        "borrow": pgettext("finance", "Borrow"),
        "return": pgettext("finance", "Return"),
        "lender": pgettext("finance", "Lender"),
        "no_data": pgettext("finance", "No scheduler events match these filters."),
        "p99": pgettext("finance", "P99 latency (ms)"),
        "sla": pgettext("finance", "P99 objective"),
        "in_flight": pgettext("finance", "Requests in flight"),
        "queue": pgettext("finance", "Wait in line (ms)"),
        "answers": pgettext("finance", "Answers"),
    }


def report_context(query: QueryDict) -> tuple[Table, dict[str, Any]]:
    """The page's table (its downloads export it) and the rest it shows: pager, chart, labels."""
    selected = event_filter(query)
    table, pager = events_table(query, selected)
    return table, {
        "pager": pager,
        "kind_labels": list(KIND_LABELS.items()),
        "chart": chart(selected, timezone.now()),
        "chart_text": chart_text(),
        "charts_available": charts_available(),
        "echarts": ECHARTS,
    }
