"""TreeScheduler in the router (compute_agents.tree.scheduling) on a driven clock: loads read from the
executors' heartbeats and the subtrees' lines; a borrow makes the registry serve the lent executor to
the borrower (chosen for its requests, counted in its capacity) until the return; each event goes to
the outbox in the platform's wire shape, in order, and to the listeners."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

from compute_agents.scheduler.config import TreeConfig
from compute_agents.scheduler.events import BORROW, RETURN, SchedulerEvent
from compute_agents.tree.events import EventOutbox
from compute_agents.tree.lines import SubtreeLines
from compute_agents.tree.registry import Heartbeat, Registry
from compute_agents.tree.scheduling import TreeScheduling

CONFIG = TreeConfig.parse(
    """\
version: 1
subtrees:
  finance:
    kind: inference
    executors: [f-1, f-2]
    sla: {p99_ms: 300, max_concurrency: 64}
  batch:
    kind: batch
    executors: [b-1, b-2, b-3]
    sla: {p99_ms: 5000, max_concurrency: 64}
"""
)
UUID7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


class Clock:
    now = 1_000.0

    def __call__(self) -> float:
        return self.now


def beat(executor: str, subtree: str, outstanding: int) -> Heartbeat:
    return Heartbeat.parse(
        {
            "executor": executor,
            "url": f"http://127.0.0.1:1/{executor}",
            "subtree": subtree,
            "model_id": "tiny-moe",
            "weights_sha3": "ab" * 32,
            "served_names": ["tiny-moe"],
            "outstanding": outstanding,
            "capacity": 4,
            "resident": {},
        }
    )


def test_a_hot_subtree_borrows_an_executor_the_registry_serves_to_it_then_gives_it_back(
    tmp_path: Path,
) -> None:
    clock = Clock()
    registry = Registry(clock=clock, rng=random.Random(7), stale_after_s=10_000)
    outbox = EventOutbox(tmp_path / "events.sqlite3")
    scheduling = TreeScheduling(CONFIG, registry, SubtreeLines(CONFIG, registry.capacity), outbox, clock)
    heard: list[SchedulerEvent] = []
    scheduling.listeners.append(heard.append)

    def beats(finance: int) -> None:
        for name in ("f-1", "f-2"):
            registry.heartbeat(beat(name, "finance", finance))
        for name, busy in (("b-1", 0), ("b-2", 1), ("b-3", 1)):
            registry.heartbeat(beat(name, "batch", busy))

    beats(finance=4)  # 8 of 8 slots: 100 %
    loads = scheduling.loads()
    assert loads["finance"].share == 1.0 and loads["batch"].share == 2 / 12
    assert scheduling.tick(0.0) == [] and scheduling.tick(10.0) == []
    [borrow] = scheduling.tick(20.0)
    assert (borrow.kind, borrow.subtree, borrow.lender, borrow.executor) == (
        BORROW,
        "finance",
        "batch",
        "b-1",
    )
    assert heard == [borrow]
    assert registry.capacity("finance") == 12 and registry.capacity("batch") == 8
    chosen = [registry.choose("finance", "tiny-moe") for _ in range(3)]
    assert "b-1" in {e.beat.executor for e in chosen if e is not None}  # the least loaded: the lent one
    assert {e.beat.executor for e in registry.healthy("batch", "tiny-moe")} == {"b-2", "b-3"}
    snapshot: dict[str, Any] = scheduling.snapshot()
    assert snapshot["loans"] == [
        {"executors": ["b-1"], "lender": "batch", "borrower": "finance", "since": 20.0}
    ]

    beats(finance=0)
    assert scheduling.tick(20.0 + 899) == []  # 14:59 held
    [back] = scheduling.tick(20.0 + 900)
    assert (back.kind, back.executor, back.lender) == (RETURN, "b-1", "batch")
    assert registry.executors["b-1"].serving == "batch" and registry.capacity("batch") == 12

    [first, second] = outbox.pending()
    assert first["kind"] == "borrow" and second["kind"] == "return"
    assert UUID7.fullmatch(first["id"]) and first["id"] != second["id"]
    assert first == {
        "id": first["id"],
        "kind": "borrow",
        "at_ns": 20_000_000_000,
        "subtree": "finance",
        "reason": borrow.reason,
        "figures": borrow.figures,
        "executor": "b-1",
        "lender": "batch",
    }
    outbox.settle([first["id"]], "shipped")
    assert [event["id"] for event in outbox.pending()] == [second["id"]]
    assert outbox.counts() == {"pending": 1, "shipped": 1}
