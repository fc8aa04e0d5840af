"""Session-wide test setup.

The test command (`make test`, through tools.testenv) points DATABASE_URL at real PostgreSQL and
CLICKHOUSE_URL at a fresh chDB directory. Run bare (plain `pytest`), the fallbacks below still keep
tests away from the developer's data: a pytest process may open only one chDB path, chosen here,
before Django's settings load.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

_scratch = tempfile.mkdtemp(prefix="treemeter-tests-")
os.environ.setdefault("TREEMETER_DATA_DIR", _scratch)
os.environ.setdefault("CLICKHOUSE_URL", f"chdb://{_scratch}/clickhouse")

_migrated = False


@pytest.fixture
def clickhouse() -> Iterator[None]:
    """ClickHouse migrated once per session, with no usage records left from other tests."""
    global _migrated
    from clickhouse_store import query
    from clickhouse_store.migrator import apply_migrations

    if not _migrated:
        apply_migrations()
        _migrated = True
    query.command("TRUNCATE TABLE usage_records")
    yield


@pytest.fixture
def redis_url() -> str:
    """The real Redis broker for worker tests; the test command (tools.testenv) always provides one."""
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        pytest.skip("TEST_REDIS_URL is not set: run the suite with `make test`, which starts Redis if needed")
    return url
