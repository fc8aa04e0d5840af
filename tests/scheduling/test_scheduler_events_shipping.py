"""The router's side and the platform's together: compute_agents.tree.events (the outbox and its
shipper, real objects) posts signed batches over HTTP to the platform (pytest-django's live server,
real PostgreSQL), which stores each event once; a post whose answer was lost, sent again, stores
nothing twice."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agents.models import Agent
from agents.services import register_agent
from compute_agents.scheduler.events import BORROW, RETURN, SCALE_UP, SchedulerEvent
from compute_agents.tree.events import EventOutbox, EventShipper
from scheduling.models import SchedulerEvent as StoredEvent
from treemeter_records import private_key_from_seed, public_key_to_b64

pytestmark = pytest.mark.django_db(transaction=True)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _events(now: float) -> list[SchedulerEvent]:
    return [
        SchedulerEvent(
            BORROW,
            now - 30,
            "finance",
            "load above 90% for 3 periods (97.0% now); batch's queue 0",
            {"load": 0.97, "periods": 3.0, "lender_load": 0.1, "lender_queue": 0.0, "executors": 1.0},
            "b-1",
            "batch",
        ),
        SchedulerEvent(
            SCALE_UP,
            now - 20,
            "finance",
            "p99 412 ms over 300 ms for 3 periods",
            {"p99_ms": 412.5, "replicas": 2.0, "desired": 4.0},
        ),
        SchedulerEvent(
            RETURN,
            now - 10,
            "finance",
            "load 20.0% under 50% after 900 s held",
            {"load": 0.2, "held_s": 900.0, "executors": 1.0},
            "b-1",
            "batch",
        ),
    ]


def test_the_routers_shipper_posts_its_outbox_and_the_platform_stores_each_event_once(
    tmp_path: Path, live_server: Any
) -> None:
    key = private_key_from_seed(os.urandom(32))
    register_agent(
        agent_id="l1-router", public_key_b64=public_key_to_b64(key), tenant_codes=[], kind=Agent.Kind.ROUTER
    )
    outbox = EventOutbox(tmp_path / "events.sqlite3")
    shipper = EventShipper(outbox, live_server.url, "l1-router", key, interval_s=60)
    try:
        sent = _events(time.time())
        ids = [outbox.add(event) for event in sent]
        wire = outbox.pending()

        assert shipper.ship_once() == 3
        assert outbox.counts() == {"shipped": 3}
        stored = {str(row.event_id): row for row in StoredEvent.objects.select_related("router")}
        assert set(stored) == set(ids)
        for event_id, event, posted in zip(ids, sent, wire, strict=True):
            row = stored[event_id]
            assert (row.router.agent_id, row.kind, row.subtree, row.reason) == (
                "l1-router",
                event.kind,
                event.subtree,
                event.reason,
            )
            assert (row.executor, row.lender) == (event.executor or "", event.lender or "")
            assert row.figures == event.figures
            assert row.at_ns == posted["at_ns"] == round(event.at * 1e9)
            assert row.at == EPOCH + timedelta(microseconds=posted["at_ns"] // 1000)

        assert shipper.ship_once() == 0  # nothing pending: nothing posted, nothing stored
        # The platform took the post but its answer was lost: the router sends the same events again.
        outbox.settle(ids, "pending")
        assert shipper.ship_once() == 3
        assert outbox.counts() == {"shipped": 3}
        assert StoredEvent.objects.count() == 3
    finally:
        shipper.stop()
        outbox.close()


def test_events_of_an_agent_that_is_not_a_router_are_kept_refused(tmp_path: Path, live_server: Any) -> None:
    """403 is the platform's final word: the outbox keeps the events with the refusal, not pending."""
    key = private_key_from_seed(os.urandom(32))
    register_agent(agent_id="gpu-1", public_key_b64=public_key_to_b64(key), tenant_codes=[])
    outbox = EventOutbox(tmp_path / "events.sqlite3")
    shipper = EventShipper(outbox, live_server.url, "gpu-1", key, interval_s=60)
    try:
        outbox.add(_events(time.time())[1])
        assert shipper.ship_once() == 0
        assert outbox.counts() == {"refused": 1}
        assert StoredEvent.objects.count() == 0
    finally:
        shipper.stop()
        outbox.close()
