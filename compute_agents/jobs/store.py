"""The router's durable job table: one SQLite file in its data directory (WAL, synchronous FULL), so a
202 answer means the job is on disk, and a router restarted mid-job still knows every attempt it sent.

A job's life: ``queued`` (accepted, 202) → published to the broker (``published_ns``) → ``running``
(a worker asked the router to dispatch it) → ``succeeded`` or ``failed`` (its answer stored). The
attempts column lists the record id of every attempt sent to an executor, written before it is sent:
a dispatch after a crash names them all in its decision's ``supersedes``, so the job is billed once.

The customer's credential is needed to forward the job to an executor (it authenticates the key
itself); it is kept encrypted (AES-GCM under a key derived from the router's key) and wiped when the
job ends.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from ..sqlite import open_wal

FINISHED = frozenset({"succeeded", "failed"})
API_STATUS = {"queued": "queued", "running": "in_progress", "succeeded": "completed", "failed": "failed"}
_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    contract TEXT NOT NULL,
    route TEXT NOT NULL,
    body BLOB NOT NULL,
    credential BLOB,
    decision TEXT NOT NULL,
    received_ns INTEGER NOT NULL,
    callback_url TEXT,
    batch_id TEXT,
    custom_id TEXT,
    state TEXT NOT NULL,
    published_ns INTEGER,
    dispatches INTEGER NOT NULL DEFAULT 0,
    attempts TEXT NOT NULL DEFAULT '[]',
    result_status INTEGER,
    result_request_id TEXT,
    result_body BLOB,
    finished_ns INTEGER
);
CREATE INDEX IF NOT EXISTS jobs_unpublished ON jobs (published_ns) WHERE published_ns IS NULL;
CREATE INDEX IF NOT EXISTS jobs_batch ON jobs (batch_id) WHERE batch_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS files (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    contract TEXT NOT NULL,
    purpose TEXT NOT NULL,
    filename TEXT NOT NULL,
    created_ns INTEGER NOT NULL,
    content BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS batches (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    contract TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    input_file_id TEXT NOT NULL,
    completion_window TEXT NOT NULL,
    metadata TEXT,
    created_ns INTEGER NOT NULL,
    refused TEXT NOT NULL,
    output_file_id TEXT,
    error_file_id TEXT,
    completed_ns INTEGER
);
"""
_COLUMNS = (
    "id, tenant, contract, route, body, decision, received_ns, callback_url, batch_id, custom_id, state, "
    "published_ns, dispatches, attempts, result_status, result_request_id, result_body, finished_ns"
)


@dataclass(frozen=True)
class Job:
    id: str
    tenant: str
    contract: str
    route: str
    body: bytes
    decision: dict[str, Any]  # the router's decision at admission: domain, confidence, path, subtree, …
    received_ns: int
    callback_url: str | None
    batch_id: str | None
    custom_id: str | None
    state: str
    published_ns: int | None
    dispatches: int
    attempts: tuple[str, ...]
    result_status: int | None
    result_request_id: str | None
    result_body: bytes | None
    finished_ns: int | None

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    def as_api(self) -> dict[str, Any]:
        """The job as ``GET /v1/jobs/{id}`` shows it (OpenAI-style object)."""
        result = None
        if self.finished:
            result = {
                "status_code": self.result_status,
                "request_id": self.result_request_id,
                "body": orjson.loads(self.result_body) if self.result_body else None,
            }
        return {
            "id": self.id,
            "object": "job",
            "status": API_STATUS[self.state],
            "endpoint": self.route,
            "created_at": self.received_ns // 10**9,
            "completed_at": self.finished_ns // 10**9 if self.finished_ns else None,
            "result": result,
        }


class JobStore:
    """The job table; every method is one short transaction (thread-safe, one connection per store)."""

    def __init__(self, path: Path, router_key: Ed25519PrivateKey) -> None:
        self._db = open_wal(path, "FULL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self._aead = AESGCM(_credential_key(router_key))

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(
        self,
        job_id: str,
        *,
        tenant: str,
        contract: str,
        route: str,
        body: bytes,
        authorization: str,
        decision: dict[str, Any],
        received_ns: int,
        callback_url: str | None = None,
        batch_id: str | None = None,
        custom_id: str | None = None,
    ) -> None:
        """Keep a new job (durably, before its 202 is sent)."""
        nonce = os.urandom(12)
        credential = nonce + self._aead.encrypt(nonce, authorization.encode(), job_id.encode())
        with self._lock:
            self._db.execute(
                "INSERT INTO jobs (id, tenant, contract, route, body, credential, decision, received_ns, "
                "callback_url, batch_id, custom_id, state) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued')",
                (
                    job_id,
                    tenant,
                    contract,
                    route,
                    body,
                    credential,
                    orjson.dumps(decision).decode(),
                    received_ns,
                    callback_url,
                    batch_id,
                    custom_id,
                ),
            )

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            row = self._db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()  # noqa: S608
        return _job(row) if row else None

    def of_batch(self, batch_id: str) -> list[Job]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM jobs WHERE batch_id = ? ORDER BY rowid",  # noqa: S608
                (batch_id,),
            ).fetchall()
        return [_job(row) for row in rows]

    def credential(self, job_id: str) -> str | None:
        """The customer's Authorization header for forwarding, while the job is not finished."""
        with self._lock:
            row = self._db.execute("SELECT credential FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None or row[0] is None:
            return None
        sealed: bytes = row[0]
        return self._aead.decrypt(sealed[:12], sealed[12:], job_id.encode()).decode()

    def unpublished(self, limit: int = 100) -> list[str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id FROM jobs WHERE published_ns IS NULL ORDER BY rowid LIMIT ?", (limit,)
            ).fetchall()
        return [row[0] for row in rows]

    def published(self, job_id: str) -> None:
        with self._lock:
            self._db.execute("UPDATE jobs SET published_ns = ? WHERE id = ?", (time.time_ns(), job_id))

    def start_dispatch(self, job_id: str) -> int:
        """Mark the job running; the number of this dispatch (1 for the first)."""
        with self._lock:
            self._db.execute(
                "UPDATE jobs SET state = 'running', dispatches = dispatches + 1 WHERE id = ?", (job_id,)
            )
            row = self._db.execute("SELECT dispatches FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return int(row[0])

    def add_attempt(self, job_id: str, record_id: str) -> None:
        """An attempt's record id, kept before the attempt is sent."""
        with self._lock:
            self._db.execute(
                "UPDATE jobs SET attempts = json_insert(attempts, '$[#]', ?) WHERE id = ?",
                (record_id, job_id),
            )

    def finish(self, job_id: str, state: str, status: int, request_id: str, body: bytes) -> None:
        """Store the answer; the credential is wiped. A finished job never changes again."""
        if state not in FINISHED:
            raise ValueError(f"a job finishes as one of {sorted(FINISHED)}, not {state!r}")
        with self._lock:
            self._db.execute(
                "UPDATE jobs SET state = ?, result_status = ?, result_request_id = ?, result_body = ?, "
                "finished_ns = ?, credential = NULL WHERE id = ? AND state NOT IN ('succeeded', 'failed')",
                (state, status, request_id, body, time.time_ns(), job_id),
            )

    def add_file(self, file: StoredFile) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO files (id, tenant, contract, purpose, filename, created_ns, content) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    file.id,
                    file.tenant,
                    file.contract,
                    file.purpose,
                    file.filename,
                    file.created_ns,
                    file.content,
                ),
            )

    def file(self, file_id: str) -> StoredFile | None:
        with self._lock:
            row = self._db.execute(
                "SELECT id, tenant, contract, purpose, filename, created_ns, content FROM files WHERE id = ?",
                (file_id,),
            ).fetchone()
        return StoredFile(*row) if row else None

    def add_batch(self, batch: Batch) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO batches (id, tenant, contract, endpoint, input_file_id, completion_window, "
                "metadata, created_ns, refused) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    batch.id,
                    batch.tenant,
                    batch.contract,
                    batch.endpoint,
                    batch.input_file_id,
                    batch.completion_window,
                    orjson.dumps(batch.metadata).decode(),
                    batch.created_ns,
                    orjson.dumps(batch.refused).decode(),
                ),
            )

    def batch(self, batch_id: str) -> Batch | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_BATCH_COLUMNS} FROM batches WHERE id = ?",  # noqa: S608 - constant columns
                (batch_id,),
            ).fetchone()
        if row is None:
            return None
        values = list(row)
        values[6], values[8] = orjson.loads(values[6]), orjson.loads(values[8])
        return Batch(*values)

    def complete_batch(self, batch_id: str, output: StoredFile, errors: StoredFile) -> None:
        """The batch's output and error files, once (a batch completes one time)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                done = self._db.execute(
                    "SELECT completed_ns FROM batches WHERE id = ?", (batch_id,)
                ).fetchone()
                if done is None or done[0] is not None:
                    self._db.execute("ROLLBACK")
                    return
                for file in (output, errors):
                    self._db.execute(
                        "INSERT INTO files (id, tenant, contract, purpose, filename, created_ns, content) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (
                            file.id,
                            file.tenant,
                            file.contract,
                            file.purpose,
                            file.filename,
                            file.created_ns,
                            file.content,
                        ),
                    )
                self._db.execute(
                    "UPDATE batches SET output_file_id = ?, error_file_id = ?, completed_ns = ? WHERE id = ?",
                    (output.id, errors.id, time.time_ns(), batch_id),
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise


@dataclass(frozen=True)
class StoredFile:
    id: str
    tenant: str
    contract: str
    purpose: str
    filename: str
    created_ns: int
    content: bytes

    def as_api(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.content),
            "created_at": self.created_ns // 10**9,
            "filename": self.filename,
            "purpose": self.purpose,
        }


@dataclass(frozen=True)
class Batch:
    id: str
    tenant: str
    contract: str
    endpoint: str
    input_file_id: str
    completion_window: str
    metadata: dict[str, Any] | None
    created_ns: int
    refused: list[dict[str, Any]]  # error-file lines of requests refused at admission
    output_file_id: str | None = None
    error_file_id: str | None = None
    completed_ns: int | None = None


_BATCH_COLUMNS = (
    "id, tenant, contract, endpoint, input_file_id, completion_window, metadata, created_ns, refused, "
    "output_file_id, error_file_id, completed_ns"
)


def _job(row: tuple[Any, ...]) -> Job:
    values = list(row)
    values[5] = orjson.loads(values[5])
    values[13] = tuple(orjson.loads(values[13]))
    return Job(*values)


def _credential_key(router_key: Ed25519PrivateKey) -> bytes:
    """An AES-256 key for credentials at rest, derived from the router's private key (HKDF-SHA256)."""
    raw = router_key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"treemeter-job-credential-v1").derive(
        raw
    )
