"""Replicas per subtree from its tail latency, with the design's published parameters
(``SchedulerSettings``): every period (10 s) each subtree's P99 over the last 60 s of answers;

- above 200 ms for 3 consecutive periods: scale up by 33 % (at least one replica), or by 100 % when
  the P99 is above 250 ms;
- under 150 ms for 5 consecutive periods: scale down by 25 % (at least one replica);
- always within the subtree's ``replicas`` bounds. A period between the two marks breaks both streaks,
  and a step starts both afresh: the gap between 150 and 200 ms keeps it from oscillating;
- no step up while replicas of the last one are still warming up (a new replica serves only once its
  warm-up check passed): their effect is not in the P99 yet, and stepping again would compound.

A period without answers counts as under 150 ms (an idle subtree shrinks to its minimum). The clock is
the caller's: ``observe`` each answer's latency, ``tick(now, replicas)`` once a period. Every period's
figures go to ``log``, the decision log; what to do with a step (start or stop executors, patch a
Deployment) is an actuator's.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from .config import SchedulerSettings, TreeConfig
from .events import SCALE_DOWN, SCALE_UP, SchedulerEvent

LOG_KEPT = 10_000


@dataclass(frozen=True)
class Period:
    """One line of the decision log."""

    at: float
    subtree: str
    p99_ms: float | None  # None: no answer in the window
    replicas: int
    desired: int
    above: int  # consecutive periods above the scale-up mark, this one included
    below: int  # consecutive periods under the scale-down mark


@dataclass
class P99Autoscaler:
    config: TreeConfig
    log: deque[Period] = field(default_factory=lambda: deque(maxlen=LOG_KEPT))
    _samples: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)
    _above: dict[str, int] = field(default_factory=dict)
    _below: dict[str, int] = field(default_factory=dict)

    @property
    def settings(self) -> SchedulerSettings:
        return self.config.settings

    def observe(self, subtree: str, at: float, latency_ms: float) -> None:
        self._samples.setdefault(subtree, deque()).append((at, latency_ms))

    def p99(self, subtree: str, now: float) -> float | None:
        """The 99th percentile (nearest rank) of the answers in ``(now - window, now]``."""
        samples = self._samples.get(subtree)
        if not samples:
            return None
        while samples and samples[0][0] <= now - self.settings.window_s:
            samples.popleft()
        latencies = sorted(latency for at, latency in samples if at <= now)
        if not latencies:
            return None
        return latencies[max(0, math.ceil(0.99 * len(latencies)) - 1)]

    def tick(
        self, now: float, replicas: Mapping[str, int], warming: Mapping[str, int] | None = None
    ) -> list[SchedulerEvent]:
        """One period: the scaling steps to take (``desired`` in each event's figures). ``replicas``
        counts those warming up too; ``warming``, those not serving yet."""
        events = []
        for name, current in replicas.items():
            subtree = self.config.subtrees.get(name)
            if subtree is None:
                continue
            p99 = self.p99(name, now)
            held = bool(warming and warming.get(name))
            event = self._step(name, now, p99, current, subtree.min_replicas, subtree.max_replicas, held)
            if event is not None:
                events.append(event)
        return events

    def _step(
        self, name: str, now: float, p99: float | None, current: int, low: int, high: int, warming: bool
    ) -> SchedulerEvent | None:
        s = self.settings
        value = 0.0 if p99 is None else p99
        above = self._above.get(name, 0) + 1 if value > s.scale_up_p99_ms else 0
        below = self._below.get(name, 0) + 1 if value < s.scale_down_p99_ms else 0
        desired, reason = current, ""
        if above >= s.scale_up_periods and warming:
            self._above[name], self._below[name] = above, below  # counted; the step waits for the warm-up
            self.log.append(Period(now, name, p99, current, current, above, below))
            return None
        if above >= s.scale_up_periods:
            fast = value > s.scale_up_fast_p99_ms
            step = s.scale_up_fast_step if fast else s.scale_up_step
            desired = current + max(1, math.ceil(current * step - 1e-9))
            mark = f"above {s.scale_up_fast_p99_ms:.0f} ms: " if fast else ""
            reason = (
                f"p99 {value:.0f} ms above {s.scale_up_p99_ms:.0f} ms for {above} periods ({mark}+{step:.0%})"
            )
        elif below >= s.scale_down_periods:
            desired = current - max(1, math.floor(current * s.scale_down_step + 1e-9))
            reason = (
                f"p99 {value:.0f} ms under {s.scale_down_p99_ms:.0f} ms for {below} periods "
                f"(-{s.scale_down_step:.0%})"
            )
        desired = min(high, max(low, desired))
        self.log.append(Period(now, name, p99, current, desired, above, below))
        # A step taken, or one the bounds held back: both streaks start again.
        self._above[name], self._below[name] = (0, 0) if reason or desired != current else (above, below)
        if desired == current:
            return None
        return SchedulerEvent(
            SCALE_UP if desired > current else SCALE_DOWN,
            now,
            name,
            reason or f"{current} replicas outside the bounds {low}..{high}",
            {"p99_ms": value, "replicas": float(current), "desired": float(desired)},
        )
