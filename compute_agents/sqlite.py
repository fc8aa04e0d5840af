"""The one way this package opens its SQLite files (the spool, the job table, the router's in-flight
ledger): write-ahead log, autocommit (each caller writes its own ``BEGIN``…``COMMIT`` or single
statements), shared across threads behind the caller's own lock."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Literal


def open_wal(path: Path, synchronous: Literal["FULL", "NORMAL"]) -> sqlite3.Connection:
    """``FULL``: a commit is on disk when it returns (fsync); ``NORMAL``: in the operating system's cache,
    which survives the process dying but not the machine."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    return db
