"""Reads of the stored scheduler events: the staff page's list and chart (finance), the events of the
subtrees that served a tenant (the portal's usage page), and the loans the borrows and returns make
(billing's cost attribution)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q, QuerySet

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


def _newest(events: QuerySet[SchedulerEvent], limit: int) -> tuple[list[SchedulerEvent], bool]:
    """The newest ``limit`` of ``events`` (ordered newest first) in time order, and whether older ones
    were left out."""
    newest = list(events[: limit + 1])
    return newest[:limit][::-1], len(newest) > limit


def chart_events(selected: EventFilter, limit: int) -> tuple[list[SchedulerEvent], bool]:
    """The newest ``limit`` matching events in time order, and whether older ones were left out."""
    return _newest(scheduler_events(selected), limit)


@dataclass(frozen=True)
class Loan:
    """Executors a router lent ``borrower`` from ``lender``, from ``start`` until ``end`` (None: not
    returned yet)."""

    router: str
    executors: tuple[str, ...]
    lender: str
    borrower: str
    start: datetime
    end: datetime | None


def loans(start: datetime, end: datetime) -> list[Loan]:
    """The loans held some time in [start, end): each borrow with the first return after it of the same
    router, executors and borrower."""
    moves = SchedulerEvent.objects.filter(
        kind__in=(SchedulerEvent.Kind.BORROW, SchedulerEvent.Kind.RETURN), at__lt=end
    ).select_related("router")
    found: list[Loan] = []
    open_loans: dict[tuple[str, str, str], Loan] = {}
    for event in moves.order_by("at_ns", "id"):
        key = (event.router.agent_id, event.executor, event.subtree)
        if event.kind == SchedulerEvent.Kind.BORROW:
            executors = tuple(name for name in event.executor.split(",") if name)
            open_loans[key] = Loan(key[0], executors, event.lender, event.subtree, event.at, None)
        elif key in open_loans:
            loan = open_loans.pop(key)
            found.append(Loan(loan.router, loan.executors, loan.lender, loan.borrower, loan.start, event.at))
    found.extend(open_loans.values())
    return sorted(
        (loan for loan in found if loan.end is None or loan.end > start), key=lambda loan: loan.start
    )


TIMELINE_BUCKETS = 720  # at most, per subtree, in a chart over time; a bucket is a minute or longer


def timeline_bucket_s(start: datetime, end: datetime) -> int:
    """The bucket, in seconds, of a subtree's service over [start, end): the charts' one rule."""
    return max(60, math.ceil((end - start).total_seconds() / TIMELINE_BUCKETS))


def route_events(
    routes: Iterable[tuple[str, str]], start: datetime, end: datetime, limit: int
) -> tuple[list[SchedulerEvent], bool]:
    """The newest ``limit`` events in [start, end) of these (router agent id, subtree) pairs, in time
    order, and whether older ones were left out. No pairs: no events."""
    matching = Q()
    for router, subtree in sorted(set(routes)):
        matching |= Q(router__agent_id=router, subtree=subtree)
    if not matching:
        return [], False
    return _newest(
        SchedulerEvent.objects.filter(matching, at__gte=start, at__lt=end).order_by("-at", "-id"), limit
    )
