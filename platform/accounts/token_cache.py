"""API tokens as authentication found them, kept in the shared cache for a short while.

Looking a token up costs a PostgreSQL round trip (and a connection health check) on every API call,
a third of what a cached dashboard answer costs. The row, with its tenant and creating user, is kept
under its digest for `API_TOKEN_CACHE_SECONDS` (60; 0 = off). Every save or delete of a token, of its
tenant or of its user forgets the affected entries at once (signals wired in accounts.apps), so a
revocation or a user made staff takes effect on the next call. Only a change that bypasses model
signals (a raw SQL or queryset `update()`) waits out the timeout; the code base does that only in
`touch` (`last_used_at`, which authorises nothing), and it refreshes the entry itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.cache import cache

from .models import ApiToken, Tenant

_KEY = "accounts:token:{}"


def token_by_digest(digest: str) -> ApiToken | None:
    """The token with this digest (its tenant and creator loaded), from the cache when kept there."""
    seconds = settings.API_TOKEN_CACHE_SECONDS
    key = _KEY.format(digest)
    if seconds:
        kept = cache.get(key)
        if kept is not None:
            return kept
    token = ApiToken.objects.select_related("tenant", "created_by").filter(digest=digest).first()
    if token is not None and seconds:
        cache.set(key, token, timeout=seconds)
    return token


def touch(token: ApiToken, now: datetime) -> None:
    """Record the token's use (at most once a minute per token) and keep the entry current."""
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    token.last_used_at = now
    if settings.API_TOKEN_CACHE_SECONDS:
        cache.set(_KEY.format(token.digest), token, timeout=settings.API_TOKEN_CACHE_SECONDS)


def forget_tokens(digests: Iterable[str]) -> None:
    keys = [_KEY.format(digest) for digest in digests]
    if keys:
        cache.delete_many(keys)


def forget_token(sender: Any, instance: ApiToken, **kwargs: Any) -> None:
    forget_tokens([instance.digest])


def forget_tenant_tokens(sender: Any, instance: Tenant, **kwargs: Any) -> None:
    forget_tokens(ApiToken.objects.filter(tenant_id=instance.pk).values_list("digest", flat=True))


def forget_user_tokens(sender: Any, instance: Any, **kwargs: Any) -> None:
    forget_tokens(ApiToken.objects.filter(created_by_id=instance.pk).values_list("digest", flat=True))
