"""The router's outbox of scheduler events: each event is written here when it happens and posted to
the platform (``protocol.SCHEDULER_EVENTS_PATH``, signed with the router's key) until the platform has
taken it. An event keeps its id across retries, so a post the platform took but whose answer was lost
is counted there as a duplicate, not stored twice. An event the platform refuses (a 4xx other than a
stale signature or a throttle; a 409 too: the id is stored there with other content, which no retry
changes) is kept with the refusal and not posted again; the log says why.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import orjson
import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from treemeter_records import new_record_id, protocol

from ..scheduler.events import SchedulerEvent
from ..sqlite import open_wal

log = structlog.get_logger("compute_agents.tree.events")

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    body BLOB NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    refusal TEXT
);
"""


def wire_event(event_id: str, event: SchedulerEvent) -> dict[str, Any]:
    """An event as the platform takes it (``at`` in seconds becomes ``at_ns``)."""
    body = {key: value for key, value in event.as_json().items() if key != "at"}
    return {"id": event_id, "at_ns": round(event.at * 1e9), **body}


class EventOutbox:
    def __init__(self, path: Path) -> None:
        self._db = open_wal(path, "NORMAL")
        self._db.executescript(SCHEMA)
        self._lock = threading.Lock()

    def add(self, event: SchedulerEvent) -> str:
        event_id = new_record_id()
        with self._lock:
            self._db.execute(
                "INSERT INTO events (id, body) VALUES (?, ?)",
                (event_id, orjson.dumps(wire_event(event_id, event))),
            )
        return event_id

    def pending(self, limit: int = protocol.SCHEDULER_EVENTS_MAX) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT body FROM events WHERE state = 'pending' ORDER BY seq LIMIT ?", (limit,)
            ).fetchall()
        return [orjson.loads(body) for (body,) in rows]

    def settle(self, ids: list[str], state: str, refusal: str | None = None) -> None:
        with self._lock:
            self._db.executemany(
                "UPDATE events SET state = ?, refusal = ? WHERE id = ?", [(state, refusal, i) for i in ids]
            )

    def recent(self, limit: int = 20) -> list[dict[str, Any]]:
        """The last ``limit`` events, shipped or not, oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT body FROM events ORDER BY seq DESC LIMIT ?", (limit,)).fetchall()
        return [orjson.loads(body) for (body,) in reversed(rows)]

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._db.execute("SELECT state, count(*) FROM events GROUP BY state").fetchall())

    def close(self) -> None:
        with self._lock:
            self._db.close()


class EventShipper:
    """Posts the outbox's pending events every ``interval_s``, in order, up to the bound per post."""

    def __init__(
        self,
        outbox: EventOutbox,
        platform_url: str,
        agent_id: str,
        key: Ed25519PrivateKey,
        interval_s: float = 1.0,
    ) -> None:
        self.outbox = outbox
        self.url = platform_url.rstrip("/") + protocol.SCHEDULER_EVENTS_PATH
        self.agent_id = agent_id
        self.key = key
        self.interval_s = interval_s
        self.http = httpx.Client(timeout=10.0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def ship_once(self) -> int:
        """Post one batch; how many events the platform took (stored or already had)."""
        events = self.outbox.pending()
        if not events:
            return 0
        raw = orjson.dumps({"events": events})
        headers = protocol.signed_headers(
            self.key, self.agent_id, "POST", protocol.SCHEDULER_EVENTS_PATH, raw
        )
        headers["content-type"] = "application/json"
        ids = [event["id"] for event in events]
        try:
            answer = self.http.post(self.url, content=raw, headers=headers)
        except httpx.HTTPError as error:
            log.info("scheduler_events_unsent", error=repr(error))
            return 0
        if answer.status_code == 200:
            self.outbox.settle(ids, "shipped")
            return len(ids)
        if 400 <= answer.status_code < 500 and answer.status_code not in (401, 429):
            log.error("scheduler_events_refused", status=answer.status_code, body=answer.text)
            self.outbox.settle(ids, "refused", answer.text[:2000])
        else:  # not ours to fix here (the signature's window, a throttle, the platform down): try again
            log.warning("scheduler_events_not_taken", status=answer.status_code, body=answer.text[:500])
        return 0

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.ship_once()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="scheduler-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.ship_once()
        self.http.close()
