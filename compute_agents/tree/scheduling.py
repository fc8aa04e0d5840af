"""TreeScheduler in the router (docs/scheduler.md): every period, each subtree's load from the registry
and its line; ``Borrowing`` moves executors between subtrees (the registry serves a lent executor to its
borrower until the unit goes back). With an actuator, the ``P99Autoscaler`` steps the replicas of the
subtrees it scales, from the latencies of the answers the router relayed (``observe``); replicas the
actuator runs that the router has not heard from yet are warming up. Each event is logged, counted for
``/metrics`` by its listeners, and kept in the router's event outbox (``<data-dir>/events.sqlite3``) until
the platform has it.

The loop runs in a thread of its own on the wall clock (``time.time``); tests call ``tick`` with theirs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog

from ..scheduler.actuator import Actuator, ScaleFailed
from ..scheduler.autoscaler import P99Autoscaler
from ..scheduler.borrowing import Borrowing, SubtreeLoad
from ..scheduler.config import TreeConfig
from ..scheduler.events import BORROW, SchedulerEvent
from .events import EventOutbox
from .lines import SubtreeLines
from .registry import Registry

log = structlog.get_logger("compute_agents.tree.scheduler")


class TreeScheduling:
    def __init__(
        self,
        config: TreeConfig,
        registry: Registry,
        lines: SubtreeLines,
        outbox: EventOutbox,
        clock: Callable[[], float] = time.time,
        actuator: Actuator | None = None,
    ) -> None:
        self.config = config
        self.registry = registry
        self.lines = lines
        self.outbox = outbox
        self.clock = clock
        self.borrowing = Borrowing(config)
        self.actuator = actuator
        self.autoscaler = P99Autoscaler(config)
        self._latencies = threading.Lock()  # answers are observed on the event loop, read by the loop here
        self.listeners: list[Callable[[SchedulerEvent], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def loads(self) -> dict[str, SubtreeLoad]:
        """Each configured subtree now: its executors (lent ones with their borrower) and their requests
        in flight, their capacity, and its line."""
        serving = self.registry.serving()
        return {
            name: SubtreeLoad(
                {e.beat.executor: e.load for e in serving.get(name, [])},
                sum(e.beat.capacity for e in serving.get(name, [])),
                self.lines.waiting(name),
            )
            for name in self.config.subtrees
        }

    def snapshot(self) -> dict[str, Any]:
        return {
            "configured": True,
            "subtrees": {
                name: {"load": load.share, "executors": sorted(load.executors), "queued": load.queued}
                for name, load in self.loads().items()
            },
            "loans": [
                {
                    "executors": list(loan.executors),
                    "lender": loan.lender,
                    "borrower": loan.borrower,
                    "since": loan.since,
                }
                for loan in self.borrowing.loans
            ],
            "replicas": self._replicas(),
            "events": self.outbox.counts(),
            "recent": self.outbox.recent(),
        }

    def _replicas(self) -> dict[str, dict[str, Any]]:
        """Per subtree the autoscaler steps: the replicas asked for, those heard, and its last period."""
        if self.actuator is None:
            return {}
        with self._latencies:
            last = {period.subtree: period for period in self.autoscaler.log}  # the latest wins
        found: dict[str, dict[str, Any]] = {}
        for name in self.actuator.subtrees():
            period = last.get(name)
            found[name] = {
                "heard": self.registry.heard(name),
                "replicas": None if period is None else period.replicas,
                "desired": None if period is None else period.desired,
                "p99_ms": None if period is None else period.p99_ms,
            }
        return found

    def observe(self, subtree: str, latency_ms: float) -> None:
        """An answer relayed for ``subtree``, from its arrival to the end of its body."""
        with self._latencies:
            self.autoscaler.observe(subtree, self.clock(), latency_ms)

    def tick(self, now: float) -> list[SchedulerEvent]:
        events = self.borrowing.tick(now, self.loads())
        published = []
        for event in events:
            executors = (event.executor or "").split(",")
            self.registry.lend(executors, event.subtree if event.kind == BORROW else None)
            published.append(self._publish(event))
        return published + self._autoscale(now)

    def _autoscale(self, now: float) -> list[SchedulerEvent]:
        """The autoscaler's period over the actuator's subtrees; a step the actuator could not take is
        logged and is no event (the next periods decide again)."""
        if self.actuator is None:
            return []
        replicas: dict[str, int] = {}
        for name in self.actuator.subtrees():
            try:
                replicas[name] = self.actuator.replicas(name)
            except ScaleFailed as error:
                log.error("scale_unknown", subtree=name, error=str(error))
        warming = {name: max(0, count - self.registry.heard(name)) for name, count in replicas.items()}
        with self._latencies:
            steps = self.autoscaler.tick(now, replicas, warming)
        taken = []
        for event in steps:
            try:
                self.actuator.scale(event.subtree, int(event.figures["desired"]))
            except ScaleFailed as error:
                log.error("scale_failed", subtree=event.subtree, reason=event.reason, error=str(error))
                continue
            taken.append(self._publish(event))
        return taken

    def _publish(self, event: SchedulerEvent) -> SchedulerEvent:
        """Log, keep and tell the event, with its subtree's P99 objective among its figures (what the
        platform's charts draw the P99 against)."""
        subtree = self.config.subtrees.get(event.subtree)
        if subtree is not None:
            event = replace(event, figures={**event.figures, "sla_p99_ms": subtree.p99_ms})
        log.info(
            "scheduler_event",
            kind=event.kind,
            subtree=event.subtree,
            executor=event.executor,
            lender=event.lender,
            reason=event.reason,
            **event.figures,
        )
        self.outbox.add(event)
        for listener in self.listeners:
            listener(event)
        return event

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.config.settings.period_s):
            try:
                self.tick(self.clock())
            except Exception:  # a period that failed must not end the loop: the next one tries again
                log.exception("scheduler_tick_failed")
