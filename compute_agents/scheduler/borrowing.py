"""Borrowing between subtrees, with the design's published parameters (``SchedulerSettings``):

- a ``shared`` subtree whose load has been above 85 % for 3 consecutive periods borrows one unit
  (``unit_executors`` executors, one by default) from a lender: a ``shared`` subtree whose queue is
  under 2, that is not borrowing, keeps at least one executor of its own, and would not be hot itself
  without the unit (its requests in flight on what it keeps at most 85 %); of those, the least loaded,
  and its least busy executors;
- a subtree holds at most 1 borrowed unit at a time;
- it gives the unit back once its load is under 70 %, and not before it has held it 15 minutes (the
  lender gets it back for a run of its own, not for a moment).

Load is requests in flight ÷ the capacity of the executors serving the subtree now (borrowed ones
included). ``strict`` subtrees never lend and never borrow. The clock is the caller's: ``tick(now, …)``
once a period, so tests drive it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .config import SchedulerSettings, TreeConfig
from .events import BORROW, RETURN, SchedulerEvent


@dataclass(frozen=True)
class SubtreeLoad:
    """One subtree at one instant: each executor serving it with its requests in flight, the capacity
    of all of them, and how many requests wait in its line."""

    executors: Mapping[str, int]  # executor → requests in flight
    capacity: int
    queued: int = 0

    @property
    def share(self) -> float:
        return sum(self.executors.values()) / self.capacity if self.capacity else 1.0


@dataclass(frozen=True)
class Loan:
    executors: tuple[str, ...]  # one unit
    lender: str
    borrower: str
    since: float


@dataclass
class Borrowing:
    config: TreeConfig
    loans: list[Loan] = field(default_factory=list)
    _hot: dict[str, int] = field(default_factory=dict)  # consecutive periods above the mark

    @property
    def settings(self) -> SchedulerSettings:
        return self.config.settings

    def serving(self, executor: str, home: str) -> str:
        """The subtree ``executor`` serves now (``home`` unless it is lent)."""
        return next((loan.borrower for loan in self.loans if executor in loan.executors), home)

    def tick(self, now: float, loads: Mapping[str, SubtreeLoad]) -> list[SchedulerEvent]:
        """One period: returns first (a unit given back may be lent again next period), then borrows."""
        events = [self._give_back(loan, now, loads) for loan in list(self.loans)]
        returned = [event for event in events if event is not None]
        for name, load in loads.items():
            hot = load.share > self.settings.borrow_above
            self._hot[name] = self._hot.get(name, 0) + 1 if hot else 0
        borrowed = []
        for name in sorted(loads, key=lambda n: -loads[n].share):
            event = self._borrow(name, now, loads)
            if event is not None:
                borrowed.append(event)
        return returned + borrowed

    def _give_back(self, loan: Loan, now: float, loads: Mapping[str, SubtreeLoad]) -> SchedulerEvent | None:
        load = loads.get(loan.borrower)
        share = load.share if load is not None else 0.0
        held = now - loan.since
        if share >= self.settings.return_below or held < self.settings.return_after_s:
            return None
        self.loans.remove(loan)
        return SchedulerEvent(
            RETURN,
            now,
            loan.borrower,
            f"load {share:.1%} under {self.settings.return_below:.0%} after {held:.0f} s held",
            {"load": share, "held_s": held, "executors": float(len(loan.executors))},
            ",".join(loan.executors),
            loan.lender,
        )

    def _borrow(self, name: str, now: float, loads: Mapping[str, SubtreeLoad]) -> SchedulerEvent | None:
        settings = self.settings
        subtree = self.config.subtrees.get(name)
        if subtree is None or not subtree.lends or self._hot.get(name, 0) < settings.borrow_periods:
            return None
        if sum(loan.borrower == name for loan in self.loans) >= settings.borrow_units:
            return None
        lender = self._lender(name, loads)
        if lender is None:
            return None
        lender_load = loads[lender]
        unit = self._unit(lender_load)
        self.loans.append(Loan(unit, lender, name, now))
        self._hot[name] = 0
        share = loads[name].share
        return SchedulerEvent(
            BORROW,
            now,
            name,
            f"load above {settings.borrow_above:.0%} for {settings.borrow_periods} periods "
            f"({share:.1%} now); {lender}'s queue {lender_load.queued}",
            {
                "load": share,
                "periods": float(settings.borrow_periods),
                "lender_load": lender_load.share,
                "lender_queue": float(lender_load.queued),
                "executors": float(len(unit)),
            },
            ",".join(unit),
            lender,
        )

    def _unit(self, load: SubtreeLoad) -> tuple[str, ...]:
        """The lender's least busy executors, one unit, leaving it one at least."""
        least_busy = sorted(sorted(load.executors), key=lambda e: load.executors[e])
        return tuple(least_busy[: min(self.settings.unit_executors, len(least_busy) - 1)])

    def _share_without(self, load: SubtreeLoad, unit: tuple[str, ...]) -> float:
        """The lender's load on what it keeps: everything in flight, on its capacity less the unit's."""
        kept = load.capacity * (len(load.executors) - len(unit)) / len(load.executors)
        return sum(load.executors.values()) / kept if kept else 1.0

    def _lender(self, borrower: str, loads: Mapping[str, SubtreeLoad]) -> str | None:
        settings = self.settings
        candidates = [
            name
            for name, load in loads.items()
            if name != borrower
            and (subtree := self.config.subtrees.get(name)) is not None
            and subtree.lends
            and load.queued < settings.lender_queue_below
            and len(load.executors) > 1
            and self._share_without(load, self._unit(load)) <= settings.borrow_above
            and not any(loan.borrower == name for loan in self.loans)
        ]
        return min(candidates, key=lambda n: (loads[n].share, n)) if candidates else None
