"""TreeScheduler in the router (docs/scheduler.md): every period, each subtree's load from the registry
and its line; ``Borrowing`` moves executors between subtrees (the registry serves a lent executor to its
borrower until the unit goes back). Each event is logged, counted for ``/metrics`` by its listeners, and
kept in the router's event outbox (``<data-dir>/events.sqlite3``) until the platform has it.

The loop runs in a thread of its own on the wall clock (``time.time``); tests call ``tick`` with theirs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

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
    ) -> None:
        self.config = config
        self.registry = registry
        self.lines = lines
        self.outbox = outbox
        self.clock = clock
        self.borrowing = Borrowing(config)
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
            "events": self.outbox.counts(),
        }

    def tick(self, now: float) -> list[SchedulerEvent]:
        events = self.borrowing.tick(now, self.loads())
        for event in events:
            executors = (event.executor or "").split(",")
            self.registry.lend(executors, event.subtree if event.kind == BORROW else None)
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
        return events

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
