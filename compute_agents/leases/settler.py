"""Settlement: each lease's cumulative spend reported to the platform with a sequence number, a renewal
for a lease in use, a final report (returning the unused rest) for one done with; and the background
loop that does it every ``report_s``, or at once when woken (a lease passed over, a new grant)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from ..entitlements import quota_period
from ..spool import Spool
from .client import LeaseClient, LeaseGone, LeaseUnavailable
from .held import DueReport, HeldLease, HeldLeases, lease_deadline

log = structlog.get_logger("compute_agents.leases")


class LeaseSettler:
    def __init__(
        self,
        spool: Spool,
        client: LeaseClient,
        leases: HeldLeases,
        cond: threading.Condition,
        *,
        idle_s: float,
        margin_s: float,
        report_s: float,
        before_round: Callable[[], None],
    ) -> None:
        self.spool = spool
        self.client = client
        self.leases = leases
        self.cond = cond
        self.idle_ns = int(idle_s * 1e9)
        self.margin_s = margin_s
        self.report_s = report_s
        self.before_round = before_round  # recover unanswered grants first
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def settle_once(self) -> None:
        """Run ``before_round``, then report each lease that needs it: final for those done with, a
        renewal for those in use."""
        self.before_round()
        now = time.time_ns()
        with self.cond:
            due = self.leases.due(now, quota_period(now), self.idle_ns)
        for report in due:
            self._report(report)

    def _report(self, report: DueReport) -> None:
        held, spent, final = report.held, report.spent, report.final
        lease = held.spooled.lease
        seq = self.spool.next_report_seq(lease)
        sent = time.time_ns()
        try:
            answer = self.client.settle(lease, seq, spent, final)
        except LeaseGone as gone:
            log.warning("lease_gone", lease=lease, error=str(gone))
            with self.cond:  # the platform takes no more reports: stop using it, forget it once idle
                idle = self.leases.gone(held)
            if idle:
                self._forget(held, spent, settled=True)
            return
        except LeaseUnavailable as error:
            log.warning("lease_report_failed", lease=lease, final=final, error=str(error))
            return
        settled = answer.state == "settled"
        deadline = held.deadline_ns
        if not settled:
            deadline = lease_deadline(sent, answer.expires_in_s, self.margin_s)
        with self.cond:
            self.leases.reported(held, spent, deadline)
        self._forget(held, spent, settled=settled)

    def _forget(self, held: HeldLease, spent: int, *, settled: bool) -> None:
        self.spool.lease_reported(held.spooled.lease, spent, held.deadline_ns, settled)
        if settled:
            with self.cond:
                self.leases.drop(held.spooled.lease)

    # -- the loop ------------------------------------------------------------------------------------

    def wake(self) -> None:
        """Run a round now rather than at the next ``report_s``."""
        self._wake.set()

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
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
