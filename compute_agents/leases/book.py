"""``LeasedQuotaBook``: admission against held leases (``reserve``, ``release``), over the grants, the
prefetcher and the settler, which share its lock; the package docstring says how the whole works."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from ..entitlements import Entitlement, Reservation, quota_period
from ..spool import Spool
from .client import LeaseClient, LeaseUnavailable
from .grants import LeaseGrants
from .held import HeldLease, HeldLeases
from .prefetch import LeasePrefetcher
from .settler import LeaseSettler


@dataclass(frozen=True)
class GrantCounts:
    """Grants answered since start: on a request's path (it waited) or ahead (prefetched)."""

    waited: int = 0
    ahead: int = 0
    prefetch_failures: int = 0  # background grants the platform could not be asked for


class LeasedQuotaBook:
    """Reservations against platform leases (see the package docstring); same interface as QuotaBook."""

    def __init__(
        self,
        spool: Spool,
        client: LeaseClient,
        *,
        block_tokens: int = 4096,
        margin_s: float = 30.0,
        idle_s: float = 30.0,
        report_s: float = 10.0,
        retry_s: float = 1.0,
        low_water: float = 0.25,
    ) -> None:
        if not 0.0 <= low_water <= 1.0:
            raise ValueError("low_water is a fraction of the block, between 0 and 1 (0: no prefetch)")
        self.spool = spool
        self.client = client
        self.cond = threading.Condition()
        self.leases = HeldLeases(spool.open_leases(), time.time_ns())
        self.settler = LeaseSettler(
            spool,
            client,
            self.leases,
            self.cond,
            idle_s=idle_s,
            margin_s=margin_s,
            report_s=report_s,
            before_round=self.recover_requests,
        )
        self.grants = LeaseGrants(
            spool,
            client,
            self.leases,
            self.cond,
            block_tokens=block_tokens,
            margin_s=margin_s,
            retry_s=retry_s,
            on_granted=self.settler.wake,
        )
        self.prefetcher = LeasePrefetcher(
            self.grants, self.leases, self.cond, low_water_tokens=int(low_water * block_tokens)
        )

    # -- admission -----------------------------------------------------------------------------------

    def reserve(self, entitlement: Entitlement, tokens: int, now_ns: int) -> Reservation | None:
        """Hold ``tokens`` out of a lease; None when the key's quota cannot cover them.

        Raises ``LeaseUnavailable`` when no held lease has room and the platform cannot be asked.
        """
        period = quota_period(now_ns)
        slot = (entitlement.key_hash, period)
        if entitlement.quota_tokens is None:
            return Reservation(entitlement.key_hash, period, tokens)
        if tokens > entitlement.quota_tokens:
            return None
        while True:
            with self.cond:
                while True:
                    held, passed_over = self.leases.reserve(slot, tokens, time.time_ns())
                    if passed_over:
                        self.settler.wake()  # the passed-over leases' rest goes back
                    if held is not None:
                        self.prefetcher.maybe_start(slot, tokens)
                        return Reservation(entitlement.key_hash, period, tokens, held.spooled.lease)
                    refusal = self.grants.refusal(slot)
                    if refusal is not None:
                        if refusal.remaining is None:
                            raise LeaseUnavailable("the platform could not be reached for a quota lease")
                        if tokens > refusal.remaining:
                            return None
                    if not self.grants.in_flight(slot):
                        break
                    self.cond.wait()
                self.grants.claim(slot)
            if not self.grants.fetch(slot, tokens):
                return None

    def release(self, reservation: Reservation, spent: int = 0) -> None:
        """After the record (its spend charged to the lease in the spool) is committed, or on failure."""
        if reservation.lease is None:
            return
        with self.cond:
            self.leases.release(reservation.lease, reservation.tokens, spent, time.time_ns())

    # -- settlement and lifecycle --------------------------------------------------------------------

    def recover_requests(self) -> None:
        """Ask again for grants whose answers never reached the spool (see ``LeaseGrants``)."""
        self.grants.recover_requests()

    def settle_once(self) -> None:
        """Recover unanswered grants, then report each lease that needs it: final for those done with,
        a renewal for those in use."""
        self.settler.settle_once()

    def start(self) -> None:
        """The settler thread; its first round runs at once (leases and grant requests from the spool)."""
        self.settler.start()

    def stop(self) -> None:
        """Stop the loop and wait for prefetches in flight: nothing talks to the platform after this."""
        self.settler.stop()
        self.prefetcher.stop()

    def close(self) -> None:
        """Stop (`stop`), then return every idle lease's unused rest (best effort: the platform may be
        away)."""
        self.stop()
        with self.cond:
            self.leases.close_idle()
        self.settle_once()

    def held(self) -> list[HeldLease]:
        """The leases held now (copies), for status and tests."""
        with self.cond:
            return self.leases.copies()

    def grant_counts(self) -> GrantCounts:
        """How many grants requests waited for, how many came ahead, how many prefetches failed."""
        with self.cond:
            return GrantCounts(self.grants.waited, self.grants.ahead, self.prefetcher.failures)
