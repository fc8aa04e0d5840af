"""Session-wide test setup.

The test command (`make test`, through tools.testenv) points DATABASE_URL at real PostgreSQL and
CLICKHOUSE_URL at a fresh chDB directory. Run bare (plain `pytest`), the fallbacks below still keep
tests away from the developer's data: a pytest process may open only one chDB path, chosen here,
before Django's settings load.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Iterator

import pytest

_scratch = tempfile.mkdtemp(prefix="treemeter-tests-")
os.environ.setdefault("TREEMETER_DATA_DIR", _scratch)
os.environ.setdefault("CLICKHOUSE_URL", f"chdb://{_scratch}/clickhouse")
# Under pytest-xdist (`make test` runs one worker per core) each worker opens its own chDB directory (the
# engine allows one process per path); pytest-django gives each its own test database. pytest-django has
# loaded the settings by now, so the setting itself is changed (no chDB connection is open yet), and the
# environment too, for the processes tests start.
_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker:
    from django.conf import settings as _settings

    _settings.CLICKHOUSE_URL = f"{_settings.CLICKHOUSE_URL}-{_worker}"
    os.environ["CLICKHOUSE_URL"] = _settings.CLICKHOUSE_URL

# No PostgreSQL session outlives its request in tests (production keeps them DB_CONN_MAX_AGE seconds): the
# live server's request threads stay up on keep-alive connections, and sessions they held would still be
# open, mid-request even, while a later test flushes the database or the run drops it.
if importlib.util.find_spec("django") is not None:  # the vLLM tier (make test-vllm) runs without Django
    from django.conf import settings as _django_settings

    _django_settings.DATABASES["default"]["CONN_MAX_AGE"] = 0
    os.environ["DB_CONN_MAX_AGE"] = "0"
    # The suite's scenarios are dated (records of November 2026, of 2025, …) while ingest accepts records
    # from the last INGEST_MAX_PAST_DAYS (35) only: the window reaches back a century here, so the
    # scenarios stay valid as the calendar moves on. tests/ingest/test_ingest_window.py sets it back.
    _django_settings.INGEST_MAX_PAST_DAYS = 36_500
    os.environ["INGEST_MAX_PAST_DAYS"] = "36500"

_migrated = False


@pytest.fixture
def clickhouse() -> Iterator[None]:
    """ClickHouse migrated once per session, with no usage records left from other tests."""
    global _migrated
    from clickhouse_store import query
    from clickhouse_store.migrator import apply_migrations
    from clickhouse_store.schema import ROLLUP_TABLES, SANDBOX_RECORDS
    from usage.cache import retire_every_answer

    if not _migrated:
        apply_migrations()
        _migrated = True
    for table in ("usage_records", SANDBOX_RECORDS, *ROLLUP_TABLES):  # no test reads another's rows
        query.command(f"TRUNCATE TABLE {table}")
    retire_every_answer()  # no dashboard answer cached over another test's rows
    yield


@pytest.fixture
def redis_url() -> str:
    """The real Redis broker for worker tests; the test command (tools.testenv) always provides one."""
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        pytest.skip("TEST_REDIS_URL is not set: run the suite with `make test`, which starts Redis if needed")
    return url
