"""Writes: a router's scheduler events, stored once each (docs/scheduler.md, "The platform's record of
scheduler events")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from agents.models import Agent
from common.errors import ApiError
from treemeter_records.timeutil import from_unix_nanos

from .models import SchedulerEvent


class SchedulingError(ApiError):
    http_status = 400


class NotARouter(SchedulingError):
    http_status = 403


class EventConflict(SchedulingError):
    http_status = 409


@dataclass(frozen=True)
class EventInput:
    """One validated event as the router sent it (``executor`` and ``lender`` blank when absent)."""

    id: str
    kind: str
    at_ns: int
    subtree: str
    reason: str
    figures: dict[str, int | float] = field(default_factory=dict)
    executor: str = ""
    lender: str = ""


@dataclass(frozen=True)
class RecordedEvents:
    accepted: int
    duplicates: int


CONTENT = ("kind", "at_ns", "subtree", "executor", "lender", "reason", "figures")


def ensure_router(agent: Agent) -> None:
    """Only an L1 router reports scheduler events: any other agent gets 403 ``not_a_router``."""
    if agent.kind != Agent.Kind.ROUTER:
        raise NotARouter(
            "not_a_router",
            f"Agent {agent.agent_id} is registered as a {agent.kind}; only a router posts scheduler events.",
            {"agent_id": agent.agent_id, "kind": agent.kind},
        )


def _differences(stored: SchedulerEvent | EventInput, event: EventInput) -> list[str]:
    return [name for name in CONTENT if getattr(stored, name) != getattr(event, name)]


@transaction.atomic
def record_scheduler_events(
    *, router: Agent, events: Sequence[EventInput], now: datetime | None = None
) -> RecordedEvents:
    """Store a router's events, all or none, in one transaction.

    An event whose (router, id) is stored already with the same content is a duplicate and changes
    nothing (so a retried post answers ``duplicates`` and stores nothing twice); the same id with other
    content refuses the whole post with 409 ``event_conflict`` naming the id. The same holds for an id
    repeated within one post. One router's posts are serialised (a lock on its agent row), so two
    concurrent posts of the same events cannot both insert them."""
    ensure_router(router)
    list(Agent.objects.select_for_update().filter(pk=router.pk).values_list("pk", flat=True))
    received = now or timezone.now()
    stored = {
        str(row.event_id): row
        for row in SchedulerEvent.objects.filter(router=router, event_id__in={e.id for e in events})
    }
    fresh: dict[str, EventInput] = {}
    duplicates = 0
    for index, event in enumerate(events):
        known: SchedulerEvent | EventInput | None = stored.get(event.id) or fresh.get(event.id)
        if known is None:
            fresh[event.id] = event
            continue
        differing = _differences(known, event)
        if differing:
            raise EventConflict(
                "event_conflict",
                f"Event {event.id} was posted before with other content ({', '.join(differing)}).",
                {"id": event.id, "index": index, "fields": differing},
            )
        duplicates += 1
    rows = [_row(router, event, received) for event in fresh.values()]
    for row in rows:
        row.full_clean(exclude=["router"], validate_unique=False, validate_constraints=False)
    SchedulerEvent.objects.bulk_create(rows)
    return RecordedEvents(accepted=len(rows), duplicates=duplicates)


def _row(router: Agent, event: EventInput, received: datetime) -> SchedulerEvent:
    return SchedulerEvent(
        router=router,
        event_id=event.id,
        kind=event.kind,
        at=from_unix_nanos(event.at_ns),
        at_ns=event.at_ns,
        subtree=event.subtree,
        executor=event.executor,
        lender=event.lender,
        reason=event.reason,
        figures=dict(event.figures),
        received_at=received,
    )
