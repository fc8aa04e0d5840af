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
from compute_agents.scheduler.events import BORROW, RETURN, SCALE_DOWN, SCALE_UP, SchedulerEvent
from compute_agents.scheduler.kubernetes import KubernetesActuator
from compute_agents.tree.events import EventOutbox
from compute_agents.tree.lines import SubtreeLines
from compute_agents.tree.registry import Heartbeat, Registry
from compute_agents.tree.scheduling import TreeScheduling
from tests.compute_agents.fake_kubernetes import FakeKubernetes, client_for

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
TOKEN = "service-account-token"
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
    assert heard == [borrow] and borrow.figures["sla_p99_ms"] == 300  # the borrower's objective
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


AUTOSCALED = TreeConfig.parse(
    """\
version: 1
subtrees:
  finance:
    kind: inference
    executors: [f-1, f-2]
    sla: {p99_ms: 300, max_concurrency: 64}
    replicas: {min: 2, max: 6}
  batch:
    kind: batch
    executors: [b-1]
    sla: {p99_ms: 5000, max_concurrency: 64}
"""
)


def test_the_autoscaler_steps_the_actuators_subtrees_from_the_answers_the_router_saw(
    tmp_path: Path,
) -> None:
    """Answers over 250 ms for three periods: +100 % on the finance Deployment (through the real
    Kubernetes client, against the fake API); no second step while the new replicas have not
    heartbeated (warming); once they have, and the answers are fast for five periods, −25 %. A
    Deployment that cannot be read is not stepped. Only the actuator's subtrees are stepped."""
    clock = Clock()
    registry = Registry(clock=clock, rng=random.Random(7), stale_after_s=10_000)
    outbox = EventOutbox(tmp_path / "events.sqlite3")
    fake = FakeKubernetes(TOKEN, {("serving", "moe-finance"): 2})
    fake.start()
    try:
        with client_for(fake.url, TOKEN) as api:
            actuator = KubernetesActuator(api, "serving", {"finance": "moe-finance"})
            scheduling = TreeScheduling(
                AUTOSCALED,
                registry,
                SubtreeLines(AUTOSCALED, registry.capacity),
                outbox,
                clock,
                actuator=actuator,
            )
            for name in ("f-1", "f-2"):
                registry.heartbeat(beat(name, "finance", 1))
            registry.heartbeat(beat("b-1", "batch", 0))

            def period(at: float, latency_ms: float) -> list[SchedulerEvent]:
                clock.now = at - 1
                for _ in range(20):
                    scheduling.observe("finance", latency_ms)
                    scheduling.observe("batch", 9_000)  # not the actuator's: never stepped
                return scheduling.tick(at)

            assert period(10, 400) == [] and period(20, 400) == []
            [up] = period(30, 400)
            assert (up.kind, up.subtree, up.figures["desired"]) == (SCALE_UP, "finance", 4)
            assert up.figures["p99_ms"] == 400
            assert fake.wanted[("serving", "moe-finance")] == 4
            assert [period(at, 400) for at in (40, 50, 60)] == [[], [], []]  # 2 of 4 heard: warming
            for name in ("f-3", "f-4"):
                registry.heartbeat(beat(name, "finance", 0))
            fake.token = "revoked"  # the Deployment cannot be read: logged, no step, no event
            assert period(70, 400) == [] and fake.wanted[("serving", "moe-finance")] == 4
            fake.token = TOKEN
            downs = [period(at, 20) for at in (140, 150, 160, 170, 180)]  # the slow ones out of the window
    finally:
        fake.stop()
    assert downs[:4] == [[], [], [], []]
    [down] = downs[4]
    assert (down.kind, down.figures["replicas"], down.figures["desired"]) == (SCALE_DOWN, 4, 3)
    assert fake.wanted[("serving", "moe-finance")] == 3
    shipped = [(e["kind"], e["figures"]["desired"]) for e in outbox.pending()]
    assert shipped == [("scale_up", 4), ("scale_down", 3)]
