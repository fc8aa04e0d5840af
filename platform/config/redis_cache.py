"""Django's Redis cache backend, with one client per connection pool instead of one per operation.

`django.core.cache.backends.redis.RedisCacheClient.get_client` builds a new `redis.Redis` around the
shared pool on every cache call; on a cached dashboard answer (token, throttle, versions and answer:
about four calls) that was a quarter of the request's CPU. A `redis.Redis` client is safe to share
between threads (each command borrows a connection from the pool), and the pool itself starts afresh
in a forked child, so the client is made once per pool and kept.
"""

from __future__ import annotations

from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient


class SharedClientRedisCacheClient(RedisCacheClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[Any, Any] = {}  # connection pool → its client

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        pool = self._get_connection_pool(write)  # type: ignore[attr-defined]  # not in django-stubs
        client = self._clients.get(pool)
        if client is None:
            client = self._clients.setdefault(pool, self._client(connection_pool=pool))  # type: ignore[attr-defined]
        return client


class SharedClientRedisCache(RedisCache):
    """`django.core.cache.backends.redis.RedisCache` with `SharedClientRedisCacheClient`."""

    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = SharedClientRedisCacheClient
