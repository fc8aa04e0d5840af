"""The router's waiting lines, one per subtree of the tree config (docs/scheduler.md): a subtree runs
at most as many requests at once as its SLA's ``max_concurrency`` and its healthy executors' capacity
allow; the others wait in its line, by priority then age, and a request that finds the line full is
turned away (429 ``queue_full``, a ``rejected`` record).

A slot freed goes to the head of the line before any newcomer: ``leave`` hands it over, so a request
arriving just then cannot overtake the ones waiting. A subtree with no healthy executor lets requests
through (they get the router's 503 at once rather than waiting for nobody); a subtree the config does
not name has no line. Everything runs on the router's event loop.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

from ..scheduler.config import TreeConfig
from ..scheduler.queue import PriorityLine, QueueFull

__all__ = ["QueueFull", "Slot", "SubtreeLines"]


class Slot:
    """A request's place in its subtree while it runs; ``release`` gives it back, once however often
    it is called (the paths that end a request overlap)."""

    def __init__(self, lines: SubtreeLines | None, subtree: str) -> None:
        self._lines, self.subtree = lines, subtree

    def release(self) -> None:
        lines, self._lines = self._lines, None
        if lines is not None:
            lines.leave(self.subtree)


class SubtreeLines:
    def __init__(self, config: TreeConfig, capacity: Callable[[str], int]) -> None:
        """``capacity(subtree)``: requests its healthy executors take at once now."""
        self.config = config
        self.capacity = capacity
        self.running: Counter[str] = Counter()
        self.lines: dict[str, PriorityLine[asyncio.Future[None]]] = {
            name: PriorityLine(subtree.queue) for name, subtree in config.subtrees.items()
        }

    def limit(self, subtree: str) -> int:
        return min(self.config.subtrees[subtree].max_concurrency, self.capacity(subtree))

    def waiting(self, subtree: str) -> int:
        line = self.lines.get(subtree)
        return len(line) if line is not None else 0

    async def enter(self, subtree: str, priority: int, arrived: float) -> Slot:
        """The request's slot once it may run; ``QueueFull`` when it must wait and the line is full."""
        line = self.lines.get(subtree)
        if line is None:
            return Slot(None, subtree)
        limit = self.limit(subtree)
        if limit == 0 or (self.running[subtree] < limit and not len(line)):
            self.running[subtree] += 1
            return Slot(self, subtree)
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line.push(turn, priority, arrived)
        try:
            await turn
        except asyncio.CancelledError:  # the customer left while waiting
            if not line.remove(turn) and turn.done() and not turn.cancelled():
                self.leave(subtree)  # its slot had been handed over: pass it on
            raise
        return Slot(self, subtree)

    def leave(self, subtree: str) -> None:
        """A request of ``subtree`` that entered is done: its slot goes to the head of the line."""
        line = self.lines.get(subtree)
        if line is None:
            return
        self.running[subtree] = max(0, self.running[subtree] - 1)
        while self.running[subtree] < max(1, self.limit(subtree)):
            turn = line.pop()
            if turn is None:
                return
            if not turn.done():
                self.running[subtree] += 1
                turn.set_result(None)
