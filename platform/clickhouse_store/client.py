"""The one ClickHouse client of this process, built lazily from `settings.CLICKHOUSE_URL`.

`CLICKHOUSE_URL` is either `chdb:///<absolute path>` (the in-process chDB engine) or
`http(s)://user:password@host:port/database` (a ClickHouse server).

chDB constraints that shape this module:
- a process can host ONE chDB engine path for its whole life, and one path can be open in only one
  process at a time. `close_client()` releases the path so another process (a Celery worker started
  by a test, a management command) can open it; the next `get_client()` here reopens it.
- neither a chDB handle nor a clickhouse-connect client with a session is safe for concurrent use:
  a query issued on a chDB handle while another thread's result is still streaming silently returns
  nothing, and settings applied with SET for one call can leak into another thread's call. Django's
  dev server and the test client call us from several threads, so every call goes through
  `locked_client()`, which holds one process-wide lock for the whole call. The lock is held for the
  HTTP client as well: it costs nothing with one request per process (gunicorn sync workers, Celery
  prefork) and keeps a single code path. The HTTP client is still created without session ids, so
  that no server-side session state ties one call to the next.

Callers send SQL through `clickhouse_store.query`, not through the client directly.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# Re-entrant: a caller holding the lock (e.g. the migrator) may call query functions that take it again.
_lock = threading.RLock()
_client: Client | None = None


def _connect(url: str) -> Client:
    parts = urlsplit(url)
    if parts.scheme == "chdb":
        path = Path(unquote(parts.path))
        if not path.is_absolute() or parts.netloc:
            raise ImproperlyConfigured(f"CLICKHOUSE_URL={url!r}: expected chdb:///<absolute path>")
        path.mkdir(parents=True, exist_ok=True)
        return clickhouse_connect.get_client(dsn=url)
    if parts.scheme in {"http", "https"}:
        return clickhouse_connect.get_client(dsn=url, autogenerate_session_id=False)
    raise ImproperlyConfigured(f"CLICKHOUSE_URL={url!r}: expected chdb:///<path> or http(s)://…")


def get_client() -> Client:
    """The process-wide client, created on first use. Use `locked_client()` to run calls on it."""
    global _client
    with _lock:
        if _client is None:
            _client = _connect(settings.CLICKHOUSE_URL)
        return _client


@contextmanager
def locked_client() -> Iterator[Client]:
    """The client, with the process-wide lock held until the block ends (see the module docstring)."""
    with _lock:
        yield get_client()


def close_client() -> None:
    """Close the client and release the chDB path; the next `get_client()` opens a new one."""
    global _client
    with _lock:
        client, _client = _client, None
        if client is not None:
            client.close()
