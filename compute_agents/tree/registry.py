"""The router's view of its executors: who registered, whether they are healthy, how loaded they are,
and a circuit breaker each. Nothing here does I/O; the router's HTTP layer feeds it heartbeats and
outcomes, and asks it for an executor.

Each subtree has a breaker too, fed by timeouts alone (``finished(…, timeout=True)``): 3 in a row
across its executors open it, and the router sends the subtree's requests to its fallback subtree
(docs/scheduler.md) until a half-open probe to the subtree succeeds.

The choice: cache affinity first. Given the experts a request's domain is predicted to use, the
executor that holds the most of them resident takes it (ties: the less loaded, then at random), unless
its load (requests in flight ÷ its capacity) is above ``AFFINITY_MAX_LOAD``. Otherwise, and when nothing
is predicted or held, power of two choices on the load.

A heartbeat is an executor's signed report (see ``heartbeat.py``): its URL, subtree, model, outstanding
requests and the experts it holds resident. An executor whose last heartbeat is older than
``stale_after_s`` is not chosen. The breaker opens after ``BREAKER_FAILURES`` consecutive failures or
timeouts; after ``cooldown_s`` one request may probe it (half-open): success closes it, failure
opens it again.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..router import DEFAULT_SUBTREE

BREAKER_FAILURES = 3
AFFINITY_MAX_LOAD = 0.85  # an executor above this share of its capacity takes no request for affinity
CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


class HeartbeatError(ValueError):
    """A heartbeat that cannot be used (the router answers 400 with the reason)."""


@dataclass(frozen=True)
class Heartbeat:
    executor: str  # the executor's agent id
    url: str
    subtree: str
    model_id: str
    weights_sha3: str
    served_names: tuple[str, ...]
    outstanding: int
    resident: dict[int, tuple[int, ...]]  # layer → experts held resident
    capacity: int = 1  # requests it serves at once (an executor that does not say: one)

    @classmethod
    def parse(cls, body: Any) -> Heartbeat:
        if not isinstance(body, dict):
            raise HeartbeatError("a heartbeat is a JSON object")
        try:
            resident = {
                int(layer): tuple(int(e) for e in experts) for layer, experts in body["resident"].items()
            }
            beat = cls(
                executor=_text(body["executor"]),
                url=_text(body["url"]).rstrip("/"),
                subtree=_text(body.get("subtree", DEFAULT_SUBTREE)),
                model_id=_text(body["model_id"]),
                weights_sha3=_text(body["weights_sha3"]),
                served_names=tuple(_text(name) for name in body["served_names"]),
                outstanding=int(body["outstanding"]),
                resident=resident,
                capacity=int(body.get("capacity", 1)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise HeartbeatError(f"bad heartbeat: {error!r}") from None
        if not beat.url.startswith(("http://", "https://")) or beat.outstanding < 0:
            raise HeartbeatError("bad heartbeat: url must be http(s) and outstanding non-negative")
        if beat.capacity < 1:
            raise HeartbeatError("bad heartbeat: capacity must be at least 1")
        return beat


def _text(value: Any) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= 256:
        raise ValueError(f"expected a non-empty string of at most 256 characters, got {value!r}")
    return value


@dataclass
class Breaker:
    cooldown_s: float
    state: str = CLOSED
    failures: int = 0
    opened_at: float = 0.0
    probing: bool = False

    def allows(self, now: float) -> bool:
        """May a request go to this executor now? In half-open, only one probe at a time."""
        if self.state == OPEN and now - self.opened_at >= self.cooldown_s:
            self.state = HALF_OPEN
        if self.state == CLOSED:
            return True
        return self.state == HALF_OPEN and not self.probing

    def begin(self) -> None:
        if self.state == HALF_OPEN:
            self.probing = True

    def succeeded(self) -> None:
        self.state, self.failures, self.probing = CLOSED, 0, False

    def failed(self, now: float) -> None:
        self.failures += 1
        self.probing = False
        if self.state == HALF_OPEN or self.failures >= BREAKER_FAILURES:
            self.state, self.opened_at = OPEN, now


@dataclass
class Executor:
    beat: Heartbeat
    seen_at: float
    breaker: Breaker
    inflight: int = 0  # requests this router has sent and not yet seen finish
    served: int = 0
    failures: int = 0
    lent_to: str | None = None  # the subtree that borrowed it (docs/scheduler.md), if any

    @property
    def serving(self) -> str:
        """The subtree it serves now: its own (its heartbeat's), or the one it is lent to."""
        return self.lent_to or self.beat.subtree

    @property
    def load(self) -> int:
        return max(self.inflight, self.beat.outstanding)

    @property
    def load_share(self) -> float:
        return self.load / self.beat.capacity

    def holds(self, experts: Iterable[Sequence[int]]) -> int:
        """How many of ``experts`` (layer, expert) it reported resident."""
        resident = self.beat.resident
        return sum(expert in resident.get(layer, ()) for layer, expert in experts)


@dataclass
class Registry:
    stale_after_s: float = 3.0
    cooldown_s: float = 2.0
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)
    executors: dict[str, Executor] = field(default_factory=dict)
    subtrees: dict[str, Breaker] = field(default_factory=dict)  # by subtree, fed by timeouts
    lock: threading.Lock = field(default_factory=threading.Lock)

    def heartbeat(self, beat: Heartbeat) -> None:
        with self.lock:
            known = self.executors.get(beat.executor)
            if known is None:
                self.executors[beat.executor] = Executor(beat, self.clock(), Breaker(self.cooldown_s))
            else:
                known.beat, known.seen_at = beat, self.clock()

    def healthy(self, subtree: str, model: str, exclude: Iterable[str] = ()) -> list[Executor]:
        """Executors of ``subtree`` serving ``model`` with a fresh heartbeat whose breaker lets a
        request through."""
        with self.lock:
            return self._healthy(subtree, model, set(exclude))

    def _healthy(self, subtree: str, model: str, skipped: set[str]) -> list[Executor]:
        now = self.clock()
        return [
            e
            for name, e in self.executors.items()
            if name not in skipped
            and e.serving == subtree
            and model in e.beat.served_names
            and now - e.seen_at <= self.stale_after_s
            and e.breaker.allows(now)
        ]

    def heard(self, subtree: str) -> int:
        """Executors of ``subtree`` (their own, lent or not) with a fresh heartbeat: the replicas that
        passed their warm-up check."""
        now = self.clock()
        with self.lock:
            return sum(
                1
                for e in self.executors.values()
                if e.beat.subtree == subtree and now - e.seen_at <= self.stale_after_s
            )

    def capacity(self, subtree: str) -> int:
        """Requests the healthy executors of ``subtree`` take at once (their reported capacities)."""
        now = self.clock()
        with self.lock:
            return sum(
                e.beat.capacity
                for e in self.executors.values()
                if e.serving == subtree and now - e.seen_at <= self.stale_after_s and e.breaker.state != OPEN
            )

    def choose(
        self,
        subtree: str,
        model: str,
        exclude: Iterable[str] = (),
        affinity: Sequence[Sequence[int]] = (),
    ) -> Executor | None:
        """The executor for a request whose domain is predicted to use the ``affinity`` experts (see the
        module's docstring); the request is counted in flight on it until ``finished``. One lock over
        the whole choice, so two requests cannot both take a half-open executor's single probe."""
        with self.lock:
            candidates = self._healthy(subtree, model, set(exclude))
            if not candidates:
                return None
            chosen = self._affine(candidates, affinity) or self._less_loaded_of_two(candidates)
            chosen.breaker.begin()
            chosen.inflight += 1
            return chosen

    def _affine(self, candidates: list[Executor], experts: Sequence[Sequence[int]]) -> Executor | None:
        if not experts:
            return None
        held = {e.beat.executor: e.holds(experts) for e in candidates}
        room = [e for e in candidates if e.load_share <= AFFINITY_MAX_LOAD and held[e.beat.executor] > 0]
        if not room:
            return None
        best = max(held[e.beat.executor] for e in room)
        least = min(e.load for e in room if held[e.beat.executor] == best)
        return self.rng.choice([e for e in room if held[e.beat.executor] == best and e.load == least])

    def _less_loaded_of_two(self, candidates: list[Executor]) -> Executor:
        """Power of two choices: of two drawn at random, the less loaded."""
        pair = self.rng.sample(candidates, 2) if len(candidates) > 1 else candidates
        return min(pair, key=lambda e: e.load)

    def finished(self, executor: Executor, *, ok: bool, timeout: bool = False) -> None:
        """An attempt ended: an answer (``ok``), or a failure (``timeout``: no answer in time)."""
        with self.lock:
            executor.inflight -= 1
            subtree = self._subtree_breaker(executor.serving)
            if ok:
                executor.served += 1
                executor.breaker.succeeded()
                subtree.succeeded()
                return
            executor.failures += 1
            executor.breaker.failed(self.clock())
            if timeout:
                subtree.failed(self.clock())
            else:
                subtree.probing = False  # a probe that failed otherwise says nothing: another may probe

    def lend(self, executors: Iterable[str], borrower: str | None) -> None:
        """Serve ``executors`` to ``borrower`` from now on (None: back to their own subtrees)."""
        with self.lock:
            for name in executors:
                if name in self.executors:
                    self.executors[name].lent_to = borrower

    def serving(self) -> dict[str, list[Executor]]:
        """The fresh executors by the subtree they serve now."""
        now = self.clock()
        by_subtree: dict[str, list[Executor]] = {}
        with self.lock:
            for e in self.executors.values():
                if now - e.seen_at <= self.stale_after_s:
                    by_subtree.setdefault(e.serving, []).append(e)
        return by_subtree

    def subtree_allows(self, subtree: str) -> bool:
        """May a request go to ``subtree`` now, or must it take the fallback? A half-open subtree lets
        one probe through at a time."""
        with self.lock:
            breaker = self._subtree_breaker(subtree)
            if not breaker.allows(self.clock()):
                return False
            breaker.begin()
            return True

    def subtree_state(self, subtree: str) -> str:
        with self.lock:
            return self._subtree_breaker(subtree).state

    def _subtree_breaker(self, subtree: str) -> Breaker:
        breaker = self.subtrees.get(subtree)
        if breaker is None:
            breaker = self.subtrees[subtree] = Breaker(self.cooldown_s)
        return breaker

    def released(self, executor: Executor) -> None:
        """The request ended without telling anything about the executor's health (the client left)."""
        with self.lock:
            executor.inflight -= 1
            executor.breaker.probing = False

    def model_card(self, model: str) -> Heartbeat | None:
        """The last heartbeat of any executor serving ``model`` (healthy or not): what the router's own
        records name as the model."""
        with self.lock:
            return next((e.beat for e in self.executors.values() if model in e.beat.served_names), None)

    def served_names(self) -> list[str]:
        now = self.clock()
        with self.lock:
            names = {
                name
                for e in self.executors.values()
                if now - e.seen_at <= self.stale_after_s
                for name in e.beat.served_names
            }
        return sorted(names)

    def snapshot(self) -> list[dict[str, Any]]:
        """What ``GET /tree/executors`` shows."""
        now = self.clock()
        with self.lock:
            return [
                {
                    "executor": name,
                    "url": e.beat.url,
                    "subtree": e.beat.subtree,
                    "serving": e.serving,
                    "model_id": e.beat.model_id,
                    "healthy": now - e.seen_at <= self.stale_after_s and e.breaker.state != OPEN,
                    "breaker": e.breaker.state,
                    "heartbeat_age_s": round(now - e.seen_at, 3),
                    "outstanding": e.beat.outstanding,
                    "capacity": e.beat.capacity,
                    "inflight": e.inflight,
                    "served": e.served,
                    "failures": e.failures,
                    "resident": {str(layer): list(experts) for layer, experts in e.beat.resident.items()},
                }
                for name, e in sorted(self.executors.items())
            ]
