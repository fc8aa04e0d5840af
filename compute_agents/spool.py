"""The durable local spool: every record is committed here (SQLite WAL, fsync on commit) before its
response leaves the agent, and leaves only when the platform acknowledged its batch.

Sequence numbers are allocated in the same transaction as the insert, from a counter that survives
acknowledgement, so they never repeat and never skip. Quota usage is settled in that transaction too.
Several processes may open one spool (SQLite locks the writers); each opens its own ``Spool``.
Quota leases held from the platform live here too, with the spend charged to each in the record's
transaction, so a restarted agent knows what it holds and what it has to report.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treemeter_records import canonical_bytes

from .sqlite import open_wal

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS records "
    "(seq INTEGER PRIMARY KEY, spooled_ns INTEGER NOT NULL, body BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS quota_usage (api_key TEXT NOT NULL, period TEXT NOT NULL, "
    "used INTEGER NOT NULL, PRIMARY KEY (api_key, period))",
    "CREATE TABLE IF NOT EXISTS leases (lease TEXT PRIMARY KEY, api_key TEXT NOT NULL, "
    "period TEXT NOT NULL, granted INTEGER NOT NULL, used INTEGER NOT NULL DEFAULT 0, "
    "deadline_ns INTEGER NOT NULL, report_seq INTEGER NOT NULL DEFAULT 0, "
    "reported INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS lease_requests (request_id TEXT PRIMARY KEY, api_key TEXT NOT NULL, "
    "period TEXT NOT NULL, tokens INTEGER NOT NULL, min_tokens INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO meta (name, value) VALUES ('next_seq', 0)",
    "INSERT OR IGNORE INTO meta (name, value) VALUES ('shipped', 0)",
    "INSERT OR IGNORE INTO meta (name, value) VALUES ('depth', 0)",
    "INSERT OR IGNORE INTO meta (name, value) VALUES ('bytes', 0)",
)


class SpoolFull(RuntimeError):
    """The spool is over its size limit: refuse new work rather than serve unmetered."""


@dataclass(frozen=True)
class Spooled:
    """A committed record and its canonical line, the bytes shipped and hashed into the log."""

    record: dict[str, Any]
    line: bytes


@dataclass(frozen=True)
class SpoolStatus:
    depth: int
    bytes: int
    next_seq: int
    shipped: int
    oldest_spooled_ns: int | None


@dataclass(frozen=True)
class QuotaCharge:
    """Tokens to add to an API key's usage for a period, in the record's transaction."""

    api_key: str
    period: str
    tokens: int
    lease: str | None = None  # the platform lease the tokens come out of, if any


@dataclass(frozen=True)
class LeaseRequest:
    """A grant asked for whose answer is not in the spool yet: asked again (same id) after a crash."""

    request_id: str
    api_key: str
    period: str
    tokens: int
    min_tokens: int


@dataclass(frozen=True)
class SpooledLease:
    """A quota lease as the spool holds it; `used` is the spend committed with records."""

    lease: str
    api_key: str
    period: str
    granted: int
    used: int
    deadline_ns: int  # this agent stops admitting against it then (before the platform's expiry)
    report_seq: int
    reported: int  # the spend the platform last acknowledged


class Spool:
    def __init__(self, path: Path, *, max_records: int = 100_000, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.path = path
        self.max_records = max_records
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._db = open_wal(path, "FULL")
        for statement in _SCHEMA:
            self._db.execute(statement)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def append(self, build: Callable[[int], dict[str, Any]], charge: QuotaCharge | None = None) -> Spooled:
        """Commit ``build(seq)`` with the next seq (and the quota charge); returns it with its line.

        Raises ``SpoolFull`` (nothing is written) when the spool is over its limit.
        """
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                meta = dict(self._db.execute("SELECT name, value FROM meta").fetchall())
                depth, size, seq = meta["depth"], meta["bytes"], meta["next_seq"]
                if depth >= self.max_records or size >= self.max_bytes:
                    raise SpoolFull(
                        f"the record spool holds {depth} records ({size} bytes), over its limit "
                        f"({self.max_records} records / {self.max_bytes} bytes)"
                    )
                record = build(seq)
                body = canonical_bytes(record)
                self._db.execute(
                    "INSERT INTO records (seq, spooled_ns, body) VALUES (?, ?, ?)",
                    (seq, time.time_ns(), body),
                )
                self._db.executemany(
                    "UPDATE meta SET value = ? WHERE name = ?",
                    [(seq + 1, "next_seq"), (depth + 1, "depth"), (size + len(body), "bytes")],
                )
                if charge is not None and charge.tokens:
                    self._db.execute(
                        "INSERT INTO quota_usage (api_key, period, used) VALUES (?, ?, ?) "
                        "ON CONFLICT (api_key, period) DO UPDATE SET used = used + excluded.used",
                        (charge.api_key, charge.period, charge.tokens),
                    )
                    if charge.lease is not None:
                        self._db.execute(
                            "UPDATE leases SET used = used + ? WHERE lease = ?", (charge.tokens, charge.lease)
                        )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return Spooled(record, body)

    def full(self) -> bool:
        status = self.status()
        return status.depth >= self.max_records or status.bytes >= self.max_bytes

    def full_message(self) -> str:
        status = self.status()
        return (
            f"the record spool holds {status.depth} records ({status.bytes} bytes), over its limit "
            f"({self.max_records} records / {self.max_bytes} bytes): the platform is not acknowledging "
            "records; new requests are refused until it does"
        )

    def pending(self, limit: int) -> list[tuple[int, int, bytes]]:
        """The oldest unacknowledged records: (seq, spooled_ns, canonical bytes)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, spooled_ns, body FROM records ORDER BY seq LIMIT ?", (limit,)
            ).fetchall()
        return [(int(s), int(t), bytes(b)) for s, t, b in rows]

    def acknowledge(self, seqs: Sequence[int]) -> None:
        """The platform acknowledged these records: they leave the spool."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                removed, size = 0, 0
                for seq in seqs:
                    row = self._db.execute("DELETE FROM records WHERE seq = ? RETURNING length(body)", (seq,))
                    for (length,) in row.fetchall():
                        removed, size = removed + 1, size + length
                self._db.executemany(
                    "UPDATE meta SET value = value + ? WHERE name = ?",
                    [(removed, "shipped"), (-removed, "depth"), (-size, "bytes")],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def quota_used(self, api_key: str, period: str) -> int:
        with self._lock:
            row = self._db.execute(
                "SELECT used FROM quota_usage WHERE api_key = ? AND period = ?", (api_key, period)
            ).fetchone()
        return int(row[0]) if row else 0

    def lease_requested(self, request: LeaseRequest) -> None:
        """Committed before the grant is sent, so a crash or a lost answer cannot leak the lease."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO lease_requests (request_id, api_key, period, tokens, min_tokens) "
                "VALUES (?, ?, ?, ?, ?)",
                (request.request_id, request.api_key, request.period, request.tokens, request.min_tokens),
            )

    def lease_requests(self) -> list[LeaseRequest]:
        with self._lock:
            rows = self._db.execute(
                "SELECT request_id, api_key, period, tokens, min_tokens FROM lease_requests ORDER BY rowid"
            ).fetchall()
        return [LeaseRequest(*row) for row in rows]

    def lease_request_done(self, request_id: str) -> None:
        """The grant was refused: nothing to recover."""
        with self._lock:
            self._db.execute("DELETE FROM lease_requests WHERE request_id = ?", (request_id,))

    def add_lease(self, lease: SpooledLease, request_id: str) -> None:
        """The granted lease, in the same transaction that closes its request."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT OR IGNORE INTO leases (lease, api_key, period, granted, deadline_ns) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (lease.lease, lease.api_key, lease.period, lease.granted, lease.deadline_ns),
                )
                self._db.execute("DELETE FROM lease_requests WHERE request_id = ?", (request_id,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def open_leases(self) -> list[SpooledLease]:
        """Leases not settled yet (a settled lease leaves the spool), oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT lease, api_key, period, granted, used, deadline_ns, report_seq, reported "
                "FROM leases ORDER BY rowid"
            ).fetchall()
        return [SpooledLease(*row) for row in rows]

    def next_report_seq(self, lease: str) -> int:
        """The sequence number of the lease's next report, committed before the report is sent."""
        with self._lock:
            ((seq,),) = self._db.execute(
                "UPDATE leases SET report_seq = report_seq + 1 WHERE lease = ? RETURNING report_seq", (lease,)
            ).fetchall()
        return int(seq)

    def lease_reported(self, lease: str, spent: int, deadline_ns: int, settled: bool) -> None:
        """The platform acknowledged a report of `spent`; a settled lease is done with."""
        with self._lock:
            if settled:
                self._db.execute("DELETE FROM leases WHERE lease = ?", (lease,))
            else:
                self._db.execute(
                    "UPDATE leases SET reported = ?, deadline_ns = ? WHERE lease = ?",
                    (spent, deadline_ns, lease),
                )

    def status(self) -> SpoolStatus:
        with self._lock:
            (oldest,) = self._db.execute(
                "SELECT spooled_ns FROM records ORDER BY seq LIMIT 1"
            ).fetchone() or (None,)
            meta = dict(self._db.execute("SELECT name, value FROM meta").fetchall())
        return SpoolStatus(meta["depth"], meta["bytes"], meta["next_seq"], meta["shipped"], oldest)
