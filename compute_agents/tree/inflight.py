"""The router's ledger of interactive requests in flight, so that a router that dies bills nobody for
an answer it never delivered.

An executor commits its ``ok`` record before it answers. If the router dies between sending a request
and handing the answer to the customer's connection, that record would be billed for an answer the
customer never got. So each attempt's record id is written here before the attempt is sent, and the
request's rows are deleted once its answer was handed over (or its refusal recorded). A router that
starts and finds rows left writes, for each request, an unbilled ``error`` record whose decision
supersedes those attempts (docs/record-format.md): none of them is billed.

SQLite in WAL mode with ``synchronous=NORMAL``: a commit is a write into the operating system's cache,
about 30 µs, and survives the router process being killed; a crash of the whole machine may lose the
last rows, and with them only this protection. Jobs are not written here: the job table keeps their
attempts, and a job dispatched again supersedes them itself (``tree/jobs.py``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..sqlite import open_wal

SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    record_id TEXT PRIMARY KEY,
    request TEXT NOT NULL,
    lost TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS attempts_request ON attempts (request);
"""


@dataclass(frozen=True)
class LostRequest:
    """A request a router took and never finished: who asked, what L1 decided, and the record ids of
    the attempts it sent (in order). Enough for the record that supersedes them."""

    request: str
    tenant: str
    contract: str
    package: str
    sla_class: str
    model: str
    start_ns: int
    l1_us: int
    decision: dict[str, Any]
    attempts: tuple[str, ...]


class InFlightLedger:
    def __init__(self, path: Path) -> None:
        self._db = open_wal(path, "NORMAL")
        self._db.executescript(SCHEMA)
        self._lock = threading.Lock()

    def opened(self, request: str, record_id: str, lost: dict[str, Any]) -> None:
        """An attempt about to be sent; ``lost`` holds the request's ``LostRequest`` fields but its id
        and attempts (the same for every attempt of a request)."""
        with self._lock:
            self._db.execute(
                "INSERT INTO attempts (record_id, request, lost) VALUES (?, ?, ?)",
                (record_id, request, orjson.dumps(lost).decode()),
            )

    def settled(self, request: str) -> None:
        """The request's answer was handed over, or its refusal recorded: nothing of it is lost."""
        with self._lock:
            self._db.execute("DELETE FROM attempts WHERE request = ?", (request,))

    def lost(self) -> list[LostRequest]:
        """The requests left in flight by an earlier process, oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT request, record_id, lost FROM attempts ORDER BY rowid").fetchall()
        grouped: dict[str, tuple[dict[str, Any], list[str]]] = {}
        for request, record_id, lost in rows:
            grouped.setdefault(request, (orjson.loads(lost), []))[1].append(record_id)
        return [
            LostRequest(request=request, attempts=tuple(attempts), **fields)
            for request, (fields, attempts) in grouped.items()
        ]

    def close(self) -> None:
        with self._lock:
            self._db.close()
