"""Start a real Celery worker process against the test databases, for tests that need one."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from celery import Celery
from django.conf import settings
from django.db import connection

from clickhouse_store.client import close_client

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Worker:
    app: Celery
    queue: str


def test_database_url() -> str:
    db = connection.settings_dict
    host = db["HOST"] or "127.0.0.1"
    if host.startswith("/"):
        return f"postgres://{db['USER']}@/{db['NAME']}?host={host}"
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{host}:{db['PORT'] or 5432}/{db['NAME']}"


@contextmanager
def celery_worker(broker_url: str) -> Iterator[Worker]:
    """A worker process on its own queue. It gets the chDB path: this process closes its client first
    (one process per chDB path) and reopens it lazily afterwards."""
    queue = f"test-{uuid.uuid4().hex[:12]}"
    env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        "CELERY_BROKER_URL": broker_url,
        "CELERY_RESULT_BACKEND": broker_url,
        "CLICKHOUSE_URL": settings.CLICKHOUSE_URL,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "platform")]),
    }
    close_client()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool=solo",
            "-Q",
            queue,
            "--loglevel=WARNING",
        ],
        cwd=ROOT,
        env=env,
    )
    # Not the current app: shared tasks in this process must keep running eagerly on the project app.
    app = Celery("tests", broker=broker_url, backend=broker_url, set_as_current=False)
    try:
        yield Worker(app=app, queue=queue)
    finally:
        process.terminate()
        process.wait(timeout=30)
        app.close()
