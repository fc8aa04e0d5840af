"""The shipper: cuts spooled records into batches (by size or age), signs them and posts them to the
ingest API; records leave the spool only once the platform answered for their batch.

Replays are safe: the platform deduplicates by (agent, seq) and record id, so a batch whose answer was
lost (or whose agent was killed before it deleted the records) is simply sent again.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import orjson
import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from treemeter_records import IngestClient, IngestRejected, IngestUnavailable, build_batch

from .spool import Spool

log = structlog.get_logger("compute_agents.shipper")


@dataclass(frozen=True)
class ShipResult:
    records: int
    accepted: int
    duplicate: int
    rejected: int


class Shipper:
    def __init__(
        self,
        spool: Spool,
        client: IngestClient,
        agent_id: str,
        key: Ed25519PrivateKey,
        *,
        batch_size: int = 500,
        max_age_s: float = 1.0,
        idle_s: float = 0.2,
    ) -> None:
        self.spool = spool
        self.client = client
        self.agent_id = agent_id
        self.key = key
        self.batch_size = batch_size
        self.max_age_ns = int(max_age_s * 1e9)
        self.idle_s = idle_s
        self.failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def ship_once(self, *, force: bool = False) -> ShipResult | None:
        """Send one batch if one is due (full, old enough, or ``force``); None if nothing was due.

        Raises ``IngestUnavailable`` (platform unreachable after retries) or ``IngestRejected``
        (the batch was refused as a whole); the records stay in the spool either way.
        """
        rows = self.spool.pending(self.batch_size)
        if not rows:
            return None
        if not force and len(rows) < self.batch_size and time.time_ns() - rows[0][1] < self.max_age_ns:
            return None
        batch = build_batch([orjson.loads(body) for _, _, body in rows], self.agent_id, self.key)
        answer = self.client.send(batch)
        if answer.rejected:
            log.error("records_rejected", batch=answer.batch, rejections=answer.rejections[:10])
        self.spool.acknowledge([seq for seq, _, _ in rows])
        return ShipResult(len(rows), answer.accepted, answer.duplicate, answer.rejected)

    def drain(self) -> int:
        """Ship everything now (used at shutdown and by `ship --once`); returns records acknowledged."""
        shipped = 0
        while (result := self.ship_once(force=True)) is not None:
            shipped += result.records
        return shipped

    def run(self) -> None:
        """Ship until stopped; an unreachable platform is retried with a growing pause."""
        while not self._stop.is_set():
            try:
                result = self.ship_once()
            except IngestUnavailable as error:
                self.failures += 1
                log.warning("ingest_unavailable", error=str(error), failures=self.failures)
                self._stop.wait(min(30.0, self.idle_s * 2**self.failures))
                continue
            except IngestRejected as error:
                self.failures += 1
                log.error("batch_refused", status=error.status, code=error.code, message=str(error))
                self._stop.wait(min(60.0, self.idle_s * 2**self.failures))
                continue
            except Exception:  # the shipper must outlive any surprise; the records stay spooled
                self.failures += 1
                log.exception("shipper_error", failures=self.failures)
                self._stop.wait(min(60.0, self.idle_s * 2**self.failures))
                continue
            self.failures = 0
            if result is None:
                self._stop.wait(self.idle_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="shipper", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
