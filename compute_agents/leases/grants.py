"""Asking the platform for a block of a key's quota.

One grant in flight per key (a slot is claimed under the book's lock, the HTTP call made without it).
A grant request is committed to the spool before it is sent; one left unanswered (a crash, the
platform away) is asked again under its id, so the platform answers the lease it granted then rather
than a new one. After a refusal or a failure the key's next grant waits ``retry_s``: requests meanwhile
are answered from what that refusal said, which spares the platform a storm.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from ..spool import LeaseRequest, Spool, SpooledLease
from .client import LeaseClient, LeaseRefused, LeaseUnavailable
from .held import HeldLeases, Slot, lease_deadline

log = structlog.get_logger("compute_agents.leases")


@dataclass(frozen=True)
class Refusal:
    """The key's last grant failed, until ``until`` (monotonic)."""

    until: float
    remaining: int | None  # the tokens the platform said were left; None: it could not be reached


class LeaseGrants:
    """Grants of blocks into the held leases (see the module docstring); callers of the under-the-lock
    methods hold ``cond``."""

    def __init__(
        self,
        spool: Spool,
        client: LeaseClient,
        leases: HeldLeases,
        cond: threading.Condition,
        *,
        block_tokens: int,
        margin_s: float,
        retry_s: float,
        on_granted: Callable[[], None],
    ) -> None:
        self.spool = spool
        self.client = client
        self.leases = leases
        self.cond = cond
        self.block_tokens = block_tokens
        self.margin_s = margin_s
        self.retry_s = retry_s
        self.on_granted = on_granted  # older leases of the key may now be returned
        self._fetching: set[Slot] = set()
        self._asking: set[str] = set()  # grant request ids in flight
        self._refused: dict[Slot, Refusal] = {}
        self.waited = 0  # grants answered on a request's path
        self.ahead = 0  # grants answered in the background (prefetched)

    # -- under the lock ------------------------------------------------------------------------------

    def in_flight(self, slot: Slot) -> bool:
        return slot in self._fetching

    def claim(self, slot: Slot) -> None:
        """This thread asks for the key's next block; ``fetch`` must follow."""
        self._fetching.add(slot)

    def refusal(self, slot: Slot) -> Refusal | None:
        """The key's refusal or failure within ``retry_s``, if any."""
        refusal = self._refused.get(slot)
        return refusal if refusal is not None and refusal.until > time.monotonic() else None

    # -- without the lock ----------------------------------------------------------------------------

    def fetch(self, slot: Slot, tokens: int, *, ahead: bool = False) -> bool:
        """Ask for a block for a claimed slot; False when the quota has not ``tokens`` left.

        Raises LeaseUnavailable when the platform cannot be asked. Either way the slot is released and
        the threads waiting on the lock are woken.
        """
        unanswered = [r.request_id for r in self.spool.lease_requests() if (r.api_key, r.period) == slot]
        request_id = unanswered[0] if unanswered else uuid.uuid4().hex
        request = LeaseRequest(request_id, slot[0], slot[1], max(tokens, self.block_tokens), tokens)
        refusal: Refusal | None = None
        held = False
        try:
            held = self._ask(request)
        except LeaseRefused as refused:
            refusal = Refusal(time.monotonic() + self.retry_s, refused.remaining)
        except LeaseUnavailable:
            refusal = Refusal(time.monotonic() + self.retry_s, None)
            raise
        finally:
            with self.cond:
                self._fetching.discard(slot)
                if held:
                    self._refused.pop(slot, None)
                    if ahead:
                        self.ahead += 1
                    else:
                        self.waited += 1
                elif refusal is not None:
                    self._refused[slot] = refusal
                self.cond.notify_all()
        return held

    def _ask(self, request: LeaseRequest, *, again: bool = False) -> bool:
        """Send a grant request (committed to the spool first, unless it is ``again``) and hold the lease.

        Raises LeaseRefused (the request is closed) or LeaseUnavailable (it stays, to be asked again).
        """
        with self.cond:  # before the spool: recover_requests reads the spool, then this set
            self._asking.add(request.request_id)
        try:
            if not again:
                self.spool.lease_requested(request)
            sent = time.time_ns()
            try:
                answer = self.client.grant(
                    request.api_key, request.period, request.tokens, request.min_tokens, request.request_id
                )
            except LeaseRefused:
                self.spool.lease_request_done(request.request_id)
                raise
            spooled = SpooledLease(
                answer.lease,
                request.api_key,
                request.period,
                answer.granted,
                used=0,
                deadline_ns=lease_deadline(sent, answer.expires_in_s, self.margin_s),
                report_seq=0,
                reported=0,
            )
            self.spool.add_lease(spooled, request.request_id)
            with self.cond:
                self.leases.hold(spooled, sent)
                self.cond.notify_all()
        finally:
            with self.cond:
                self._asking.discard(request.request_id)
        self.on_granted()
        return True

    def recover_requests(self) -> None:
        """Ask again, with the same ids, for grants whose answers never reached the spool (a crash, or
        lost answers): the platform answers the lease it granted then, which is then used or returned."""
        requests = self.spool.lease_requests()
        with self.cond:
            asking = set(self._asking)
        for request in requests:
            if request.request_id in asking:
                continue
            try:
                self._ask(request, again=True)
            except (LeaseRefused, LeaseUnavailable) as error:
                log.info("lease_request_not_recovered", request_id=request.request_id, error=str(error))
