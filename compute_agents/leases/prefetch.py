"""The next block ahead of need: below the low-water mark, the reservation that crossed it starts a
background grant, so requests only wait for a grant when nothing is left."""

from __future__ import annotations

import threading
import time

import structlog

from .client import LeaseUnavailable
from .grants import LeaseGrants
from .held import HeldLeases, Slot

log = structlog.get_logger("compute_agents.leases")


class LeasePrefetcher:
    """Background grants (one per key at a time, shared with the grants on a request's path)."""

    def __init__(
        self, grants: LeaseGrants, leases: HeldLeases, cond: threading.Condition, *, low_water_tokens: int
    ) -> None:
        self.grants = grants
        self.leases = leases
        self.cond = cond
        self.low_water_tokens = low_water_tokens
        self.failures = 0  # background grants the platform could not be asked for
        self._threads: set[threading.Thread] = set()
        self._stopped = False

    def maybe_start(self, slot: Slot, tokens: int) -> None:
        """Under the lock: below the low-water mark, grant the next block in the background.

        Not while a grant of the key is in flight (one per key: no duplicate grants), nor within
        ``retry_s`` of a refusal or failure; a failed prefetch is tried again by a later reservation.
        """
        if self.low_water_tokens <= 0 or self._stopped or self.grants.in_flight(slot):
            return
        if self.grants.refusal(slot) is not None:
            return
        if self.leases.room(slot, time.time_ns()) >= self.low_water_tokens:
            return
        self.grants.claim(slot)
        thread = threading.Thread(
            target=self._run, args=(slot, tokens), name="quota-lease-prefetch", daemon=True
        )
        self._threads.add(thread)
        thread.start()

    def _run(self, slot: Slot, tokens: int) -> None:
        try:
            if not self.grants.fetch(slot, tokens, ahead=True):
                log.info("lease_prefetch_refused", period=slot[1], tokens=tokens)
        except LeaseUnavailable as error:
            with self.cond:
                self.failures += 1
            log.warning("lease_prefetch_failed", period=slot[1], error=str(error))
        finally:
            with self.cond:
                self._threads.discard(threading.current_thread())

    def stop(self) -> None:
        """No prefetch starts after this; wait for those in flight."""
        with self.cond:
            self._stopped = True
            threads = list(self._threads)
        for thread in threads:
            thread.join()
