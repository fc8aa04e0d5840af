"""Reads of the stored scheduler events: the staff page's list and chart (finance)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet

from .models import SchedulerEvent


@dataclass(frozen=True)
class EventFilter:
    """Narrows the events: a subtree, a kind, and ``[start, end)`` (UTC); empty values match all."""

    subtree: str = ""
    kind: str = ""
    start: datetime | None = None
    end: datetime | None = None


def scheduler_events(selected: EventFilter) -> QuerySet[SchedulerEvent]:
    """The matching events, newest first (ties by arrival), with their router."""
    rows = SchedulerEvent.objects.select_related("router")
    if selected.subtree:
        rows = rows.filter(subtree=selected.subtree)
    if selected.kind:
        rows = rows.filter(kind=selected.kind)
    if selected.start is not None:
        rows = rows.filter(at__gte=selected.start)
    if selected.end is not None:
        rows = rows.filter(at__lt=selected.end)
    return rows.order_by("-at", "-id")


def chart_events(selected: EventFilter, limit: int) -> tuple[list[SchedulerEvent], bool]:
    """The newest ``limit`` matching events in time order, and whether older ones were left out."""
    newest = list(scheduler_events(selected)[: limit + 1])
    return newest[:limit][::-1], len(newest) > limit
