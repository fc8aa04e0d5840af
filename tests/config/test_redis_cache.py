"""The Redis cache backend keeps one client per connection pool and still behaves as Django's."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

from config.redis_cache import SharedClientRedisCache


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
