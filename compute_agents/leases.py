"""Quota leases: how several agents serving one API key share its monthly quota without overspending.

The platform grants each agent blocks of the key's quota (``POST /v1/entitlements/leases``, under a
row lock there). ``LeasedQuotaBook`` admits a request only against tokens of a lease it holds:

- ``reserve`` takes the worst case (prompt + max_tokens) out of a held lease, under the book's lock.
  When no held lease has room, one thread per key asks the platform for a new block (the lock is not
  held across the HTTP call; the others wait for its answer, then look again).
- Ahead of that, when what the key's held leases have left falls below the low-water mark (a fraction
  of the block), the reservation that crossed it starts a background grant of the next block: one
  grant in flight per key, prefetch or not, so requests only wait for a grant when nothing is left.
- The spend of each request is charged to its lease in the spool, in the record's transaction.
- A grant request is committed to the spool before it is sent; one whose answer never arrived (a
  crash, lost answers) is asked again with the same id, and the platform answers the same lease.
- ``settle_once`` (a background loop) reports each lease's cumulative spend with a sequence number:
  a non-final report renews a lease in use; a final one returns the unused rest, for a lease that is
  idle, passed over for a newer block (a request did not fit in it), past its deadline or from a
  past month. A lease being closed takes no new reservations, so the final figure cannot grow after
  it is sent.
- Offline, the agent serves only within the leases it holds, until their deadline (the platform's
  expiry minus a margin); then requests get 503 until the platform answers again.

Keys without a quota need no lease and never call the platform.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

import httpx
import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from treemeter_records import protocol

from .entitlements import Entitlement, Reservation, quota_period
from .spool import LeaseRequest, Spool, SpooledLease

log = structlog.get_logger("compute_agents.leases")


class LeaseUnavailable(RuntimeError):
    """The platform could not be asked for a lease (unreachable, or an unexpected answer)."""


class LeaseRefused(RuntimeError):
    """The platform has fewer tokens left for this key and month than the request needs."""

    def __init__(self, remaining: int) -> None:
        super().__init__(f"{remaining} tokens remain")
        self.remaining = remaining


class LeaseGone(RuntimeError):
    """The platform no longer takes reports for this lease (settled already, or unknown)."""


@dataclass(frozen=True)
class LeaseAnswer:
    lease: str
    granted: int
    state: str
    expires_in_s: float


class LeaseClient:
    """Signed calls to the platform's lease endpoints."""

    def __init__(
        self,
        platform_url: str,
        agent_id: str,
        agent_key: Ed25519PrivateKey,
        *,
        http: httpx.Client | None = None,
        attempts: int = 2,
    ) -> None:
        self.platform_url = platform_url.rstrip("/")
        self.agent_id = agent_id
        self.agent_key = agent_key
        self.http = http or httpx.Client(timeout=5.0)
        self.attempts = attempts

    def _post(self, path: str, payload: dict[str, Any]) -> httpx.Response:
        """POST, retried on transport errors with the same body (grants and reports are idempotent)."""
        body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
        for attempt in range(1, self.attempts + 1):
            headers = protocol.signed_headers(self.agent_key, self.agent_id, "POST", path, body)
            headers["Content-Type"] = "application/json"
            try:
                return self.http.post(self.platform_url + path, content=body, headers=headers)
            except httpx.HTTPError as error:
                if attempt == self.attempts:
                    raise LeaseUnavailable(f"platform unreachable: {error}") from None
        raise AssertionError("unreachable")

    @staticmethod
    def _body(response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise LeaseUnavailable(f"the platform answered {response.status_code} without a JSON object")
        return body

    def _answer(self, response: httpx.Response) -> LeaseAnswer:
        body = self._body(response)
        try:
            lease, granted, state = str(body["lease"]), int(body["granted_tokens"]), str(body["state"])
            return LeaseAnswer(lease, granted, state, float(body["expires_in_s"]))
        except (KeyError, TypeError, ValueError):
            raise LeaseUnavailable(f"an unexpected lease answer: {str(body)[:200]}") from None

    def grant(self, key_hash: str, period: str, tokens: int, min_tokens: int, request_id: str) -> LeaseAnswer:
        response = self._post(
            protocol.LEASES_PATH,
            {
                "key_hash": key_hash,
                "period": period,
                "tokens": tokens,
                "min_tokens": min_tokens,
                "request_id": request_id,
            },
        )
        if response.status_code == 429:
            details = self._body(response).get("details")
            raise LeaseRefused(int(details.get("remaining_tokens", 0)) if isinstance(details, dict) else 0)
        if response.status_code not in (200, 201):
            raise LeaseUnavailable(f"lease grant answered {response.status_code}: {response.text[:200]}")
        return self._answer(response)

    def settle(self, lease: str, seq: int, spent: int, final: bool) -> LeaseAnswer:
        response = self._post(
            protocol.lease_settle_path(lease), {"seq": seq, "spent_tokens": spent, "final": final}
        )
        if response.status_code == 404 or (
            response.status_code == 409 and self._body(response).get("code") == "lease_settled"
        ):
            raise LeaseGone(f"lease report answered {response.status_code}: {response.text[:200]}")
        if response.status_code != 200:
            raise LeaseUnavailable(f"lease report answered {response.status_code}: {response.text[:200]}")
        return self._answer(response)


@dataclass(frozen=True)
class GrantCounts:
    """Grants answered since start: on a request's path (it waited) or ahead (prefetched)."""

    waited: int = 0
    ahead: int = 0
    prefetch_failures: int = 0  # background grants the platform could not be asked for


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
    def slot(self) -> tuple[str, str]:
        return self.spooled.api_key, self.spooled.period

    def room(self, now_ns: int) -> int:
        if self.closing or now_ns >= self.deadline_ns:
            return 0
        return self.spooled.granted - self.used - self.reserved


class LeasedQuotaBook:
    """Reservations against platform leases (see the module docstring); same interface as QuotaBook."""

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
        self.block_tokens = block_tokens
        self.low_water_tokens = int(low_water * block_tokens)
        self.margin_s = margin_s
        self.idle_ns = int(idle_s * 1e9)
        self.report_s = report_s
        self.retry_s = retry_s
        self.cond = threading.Condition()
        now = time.time_ns()
        self.leases: dict[str, HeldLease] = {
            s.lease: HeldLease(s, s.used, s.reported, s.deadline_ns, active_ns=now)
            for s in spool.open_leases()
        }
        self._fetching: set[tuple[str, str]] = set()
        self._asking: set[str] = set()  # grant request ids in flight
        # slot → (monotonic until, remaining tokens or None when unreachable): spares the platform a storm
        self._refused: dict[tuple[str, str], tuple[float, int | None]] = {}
        self._prefetches: set[threading.Thread] = set()
        self._counts = GrantCounts()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

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
                    held = self._fitting(slot, tokens)
                    if held is not None:
                        held.reserved += tokens
                        self._prefetch_if_low(slot, tokens)
                        return Reservation(entitlement.key_hash, period, tokens, held.spooled.lease)
                    refusal = self._refused.get(slot)
                    if refusal is not None and refusal[0] > time.monotonic():
                        if refusal[1] is None:
                            raise LeaseUnavailable("the platform could not be reached for a quota lease")
                        if tokens > refusal[1]:
                            return None
                    if slot not in self._fetching:
                        break
                    self.cond.wait()
                self._fetching.add(slot)
            if not self._fetch(slot, tokens):
                return None

    def _fitting(self, slot: tuple[str, str], tokens: int) -> HeldLease | None:
        """The oldest lease of the key with room (drain old blocks before new ones); the older ones it
        passes over are marked, and their rest returned by the settler."""
        now = time.time_ns()
        skipped: list[HeldLease] = []
        for held in self.leases.values():
            if held.slot != slot:
                continue
            if held.room(now) >= tokens:
                fresh = [s for s in skipped if not s.passed_over]
                for older in fresh:
                    older.passed_over = True
                if fresh:
                    self._wake.set()
                return held
            skipped.append(held)
        return None

    def _prefetch_if_low(self, slot: tuple[str, str], tokens: int) -> None:
        """Under the lock: below the low-water mark, grant the next block in the background.

        Not while a grant of the key is in flight (one per key: no duplicate grants), nor within
        ``retry_s`` of a refusal or failure; a failed prefetch is tried again by a later reservation.
        """
        if self.low_water_tokens <= 0 or slot in self._fetching or self._stop.is_set():
            return
        refusal = self._refused.get(slot)
        if refusal is not None and refusal[0] > time.monotonic():
            return
        now = time.time_ns()
        if sum(h.room(now) for h in self.leases.values() if h.slot == slot) >= self.low_water_tokens:
            return
        self._fetching.add(slot)
        thread = threading.Thread(
            target=self._prefetch, args=(slot, tokens), name="quota-lease-prefetch", daemon=True
        )
        self._prefetches.add(thread)
        thread.start()

    def _prefetch(self, slot: tuple[str, str], tokens: int) -> None:
        try:
            if not self._fetch(slot, tokens, ahead=True):
                log.info("lease_prefetch_refused", period=slot[1], tokens=tokens)
        except LeaseUnavailable as error:
            with self.cond:
                self._counts = replace(self._counts, prefetch_failures=self._counts.prefetch_failures + 1)
            log.warning("lease_prefetch_failed", period=slot[1], error=str(error))
        finally:
            with self.cond:
                self._prefetches.discard(threading.current_thread())

    def _fetch(self, slot: tuple[str, str], tokens: int, *, ahead: bool = False) -> bool:
        """Ask for a block (the lock not held); False when the quota has not `tokens` left.

        A request of this key left unanswered (the platform away) is asked again under its id rather
        than a new one: after an outage the agent does not collect one lease per failed attempt.
        """
        unanswered = [r.request_id for r in self.spool.lease_requests() if (r.api_key, r.period) == slot]
        request_id = unanswered[0] if unanswered else uuid.uuid4().hex
        request = LeaseRequest(request_id, slot[0], slot[1], max(tokens, self.block_tokens), tokens)
        refusal: tuple[float, int | None] | None = None
        held = False
        try:
            held = self._ask(request)
        except LeaseRefused as refused:
            refusal = (time.monotonic() + self.retry_s, refused.remaining)
        except LeaseUnavailable:
            refusal = (time.monotonic() + self.retry_s, None)
            raise
        finally:
            with self.cond:
                self._fetching.discard(slot)
                if held:
                    self._refused.pop(slot, None)
                    counts = self._counts
                    self._counts = (
                        replace(counts, ahead=counts.ahead + 1)
                        if ahead
                        else replace(counts, waited=counts.waited + 1)
                    )
                elif refusal is not None:
                    self._refused[slot] = refusal
                self.cond.notify_all()
        return held

    def _ask(self, request: LeaseRequest, *, again: bool = False) -> bool:
        """Send a grant request (committed to the spool first, unless it is `again`) and hold the lease.

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
                deadline_ns=self._deadline(sent, answer.expires_in_s),
                report_seq=0,
                reported=0,
            )
            self.spool.add_lease(spooled, request.request_id)
            with self.cond:
                if answer.lease not in self.leases:
                    self.leases[answer.lease] = HeldLease(spooled, 0, 0, spooled.deadline_ns, active_ns=sent)
                self.cond.notify_all()
        finally:
            with self.cond:
                self._asking.discard(request.request_id)
        self._wake.set()  # older leases of the key may now be returned
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

    def _deadline(self, sent_ns: int, expires_in_s: float) -> int:
        """When to stop admitting against a lease: its expiry, from our send time, less a margin."""
        return sent_ns + int((expires_in_s - min(self.margin_s, expires_in_s / 2)) * 1e9)

    def release(self, reservation: Reservation, spent: int = 0) -> None:
        """After the record (its spend charged to the lease in the spool) is committed, or on failure."""
        if reservation.lease is None:
            return
        with self.cond:
            held = self.leases[reservation.lease]
            held.reserved -= reservation.tokens
            held.used += spent
            held.active_ns = time.time_ns()

    # -- settlement ----------------------------------------------------------------------------------

    def settle_once(self) -> None:
        """Recover unanswered grants, then report each lease that needs it: final for those done with,
        a renewal for those in use."""
        self.recover_requests()
        now = time.time_ns()
        period = quota_period(now)
        due: list[tuple[HeldLease, int, bool]] = []
        with self.cond:
            for held in self.leases.values():
                done = (
                    held.closing
                    or now >= held.deadline_ns
                    or held.passed_over
                    or held.spooled.period != period
                    or now - held.active_ns >= self.idle_ns
                )
                if done and held.reserved == 0:
                    held.closing = True
                    due.append((held, held.used, True))
                elif held.used != held.reported or held.deadline_ns - now < self.idle_ns:
                    due.append((held, held.used, False))
        for held, spent, final in due:
            self._report(held, spent, final)

    def _report(self, held: HeldLease, spent: int, final: bool) -> None:
        lease = held.spooled.lease
        seq = self.spool.next_report_seq(lease)
        sent = time.time_ns()
        try:
            answer = self.client.settle(lease, seq, spent, final)
        except LeaseGone as gone:
            log.warning("lease_gone", lease=lease, error=str(gone))
            with self.cond:  # the platform takes no more reports: stop using it, forget it once idle
                held.closing = True
                idle = held.reserved == 0
            if idle:
                self._forget(held, spent, settled=True)
            return
        except LeaseUnavailable as error:
            log.warning("lease_report_failed", lease=lease, final=final, error=str(error))
            return
        settled = answer.state == "settled"
        deadline = held.deadline_ns
        if not settled:
            deadline = self._deadline(sent, answer.expires_in_s)
        with self.cond:
            held.reported, held.deadline_ns = spent, deadline
        self._forget(held, spent, settled=settled)

    def _forget(self, held: HeldLease, spent: int, *, settled: bool) -> None:
        self.spool.lease_reported(held.spooled.lease, spent, held.deadline_ns, settled)
        if settled:
            with self.cond:
                self.leases.pop(held.spooled.lease, None)

    def start(self) -> None:
        """The settler thread; its first round runs at once (leases and grant requests from the spool)."""
        self._wake.set()
        self._thread = threading.Thread(target=self._loop, name="quota-leases", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.report_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            self.settle_once()

    def stop(self) -> None:
        """Stop the loop and wait for prefetches in flight: nothing talks to the platform after this."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        with self.cond:  # no prefetch starts once _stop is set
            prefetches = list(self._prefetches)
        for thread in prefetches:
            thread.join()

    def close(self) -> None:
        """Stop (`stop`), then return every idle lease's unused rest (best effort: the platform may be
        away)."""
        self.stop()
        with self.cond:
            for held in self.leases.values():
                if held.reserved == 0:
                    held.closing = True
        self.settle_once()

    def held(self) -> list[HeldLease]:
        """The leases held now (copies), for status and tests."""
        with self.cond:
            return [replace(h) for h in self.leases.values()]

    def grant_counts(self) -> GrantCounts:
        """How many grants requests waited for, how many came ahead, how many prefetches failed."""
        with self.cond:
            return self._counts
