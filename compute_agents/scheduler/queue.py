"""A subtree's waiting line: bounded, served by priority (higher first), then by age (older first).

A request that finds the line full is refused (the router answers 429 and records it ``rejected``);
nothing already waiting is pushed out for it, whatever its priority.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(order=True)
class _Entry(Generic[T]):
    key: tuple[int, float, int]
    item: T = field(compare=False)


class QueueFull(Exception):
    """The subtree's line is at its bound."""


class PriorityLine(Generic[T]):
    def __init__(self, bound: int) -> None:
        if bound < 0:
            raise ValueError("a queue bound cannot be negative")
        self.bound = bound
        self._heap: list[_Entry[T]] = []
        self._order = itertools.count()  # arrivals in the same instant keep their order
        self._lock = threading.Lock()

    def push(self, item: T, priority: int, arrived: float) -> None:
        """Wait in line; ``QueueFull`` when ``bound`` requests already wait."""
        with self._lock:
            if len(self._heap) >= self.bound:
                raise QueueFull(f"{len(self._heap)} requests already wait (the bound is {self.bound})")
            heapq.heappush(self._heap, _Entry((-priority, arrived, next(self._order)), item))

    def pop(self) -> T | None:
        """The next to serve, or None when nobody waits."""
        with self._lock:
            return heapq.heappop(self._heap).item if self._heap else None

    def remove(self, item: T) -> bool:
        """Take ``item`` out of the line (its caller gave up); whether it was there."""
        with self._lock:
            for index, entry in enumerate(self._heap):
                if entry.item is item:
                    self._heap[index] = self._heap[-1]
                    self._heap.pop()
                    heapq.heapify(self._heap)
                    return True
            return False

    def __len__(self) -> int:
        with self._lock:
            return len(self._heap)
