"""The leases an agent holds and the arithmetic on them: room, the lease a request fits, what is due for
a report, deadlines.

Pure bookkeeping: no lock of its own (callers hold the book's lock), no spool, no platform; every time
is passed in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from ..spool import SpooledLease

Slot = tuple[str, str]  # (API key hash, quota period): a key's quota for one month


@dataclass
class HeldLease:
    spooled: SpooledLease
    used: int
    reported: int
    deadline_ns: int
    reserved: int = 0
    closing: bool = False  # a final report is due or sent: no new reservations
    passed_over: bool = False  # a request did not fit and took a newer lease of the key: return the rest
    active_ns: int = 0  # the last time a request used it (or when granted)

    @property
    def slot(self) -> Slot:
        return self.spooled.api_key, self.spooled.period

    def room(self, now_ns: int) -> int:
        if self.closing or now_ns >= self.deadline_ns:
            return 0
        return self.spooled.granted - self.used - self.reserved


@dataclass(frozen=True)
class DueReport:
    """A report to send: the lease, the spend it reports, and whether it is the final one."""

    held: HeldLease
    spent: int
    final: bool


def lease_deadline(sent_ns: int, expires_in_s: float, margin_s: float) -> int:
    """When to stop admitting against a lease: its expiry, from our send time, less a margin (at most
    half the lease's life)."""
    return sent_ns + int((expires_in_s - min(margin_s, expires_in_s / 2)) * 1e9)


class HeldLeases:
    """The held leases, oldest first (old blocks are drained before new ones)."""

    def __init__(self, spooled: Iterable[SpooledLease], now_ns: int) -> None:
        self._leases: dict[str, HeldLease] = {
            s.lease: HeldLease(s, s.used, s.reported, s.deadline_ns, active_ns=now_ns) for s in spooled
        }

    def reserve(self, slot: Slot, tokens: int, now_ns: int) -> tuple[HeldLease | None, bool]:
        """Hold ``tokens`` in the oldest lease of the key with room; the older ones it passes over are
        marked, their rest to be returned. Returns the lease (None: none has room) and whether a lease
        was newly passed over (a final report is due)."""
        skipped: list[HeldLease] = []
        for held in self._leases.values():
            if held.slot != slot:
                continue
            if held.room(now_ns) >= tokens:
                fresh = [s for s in skipped if not s.passed_over]
                for older in fresh:
                    older.passed_over = True
                held.reserved += tokens
                return held, bool(fresh)
            skipped.append(held)
        return None, False

    def release(self, lease: str, tokens: int, spent: int, now_ns: int) -> None:
        """A reservation of ``tokens`` ends, ``spent`` of them used."""
        held = self._leases[lease]
        held.reserved -= tokens
        held.used += spent
        held.active_ns = now_ns

    def room(self, slot: Slot, now_ns: int) -> int:
        """What the key's held leases have left."""
        return sum(h.room(now_ns) for h in self._leases.values() if h.slot == slot)

    def hold(self, spooled: SpooledLease, granted_ns: int) -> None:
        """A lease just granted (a lease already held, answered again, is kept as it is)."""
        if spooled.lease not in self._leases:
            self._leases[spooled.lease] = HeldLease(spooled, 0, 0, spooled.deadline_ns, active_ns=granted_ns)

    def due(self, now_ns: int, period: str, idle_ns: int) -> list[DueReport]:
        """The reports to send now: final (the lease marked closing) for a lease done with and not
        reserved, idle, passed over, past its deadline or of a past month; a renewal for one in use whose
        spend changed or whose deadline comes within ``idle_ns``."""
        due: list[DueReport] = []
        for held in self._leases.values():
            done = (
                held.closing
                or now_ns >= held.deadline_ns
                or held.passed_over
                or held.spooled.period != period
                or now_ns - held.active_ns >= idle_ns
            )
            if done and held.reserved == 0:
                held.closing = True
                due.append(DueReport(held, held.used, True))
            elif held.used != held.reported or held.deadline_ns - now_ns < idle_ns:
                due.append(DueReport(held, held.used, False))
        return due

    def close_idle(self) -> None:
        """Every lease without a reservation takes no more: its final report is due."""
        for held in self._leases.values():
            if held.reserved == 0:
                held.closing = True

    @staticmethod
    def gone(held: HeldLease) -> bool:
        """The platform takes no more reports for ``held``: it takes no reservations; True when idle."""
        held.closing = True
        return held.reserved == 0

    @staticmethod
    def reported(held: HeldLease, spent: int, deadline_ns: int) -> None:
        held.reported, held.deadline_ns = spent, deadline_ns

    def drop(self, lease: str) -> None:
        """A settled lease is forgotten."""
        self._leases.pop(lease, None)

    def copies(self) -> list[HeldLease]:
        return [replace(h) for h in self._leases.values()]
