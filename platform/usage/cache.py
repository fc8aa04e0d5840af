"""Dashboard answers kept in the cache, keyed by the version of the data they were computed from.

Every dashboard read costs a ClickHouse query (5–20 ms of engine time even on the rollups), and
dashboards ask the same questions again and again: each page load, each refresh, each colleague
opening the same tenant. An answer is therefore kept under its question together with the tenant's
*data version* it was computed from, a random token replaced whenever records for that tenant are
stored (`bump_data_versions`, on ingest's `records_stored` event after each ClickHouse insert; a rollup
rebuild retires every answer at once with `retire_every_answer`). A kept answer counts only while its version
is the current one, so it is never older than the data: there is no staleness window.

Order matters for that guarantee: the version is read *before* the query runs. A query that races
an insert may store newer data under the old version, never older data under the new one.

An answer that also states contract terms (the latency objectives of the latency view, read from
PostgreSQL) depends on a third version, the *terms version*, replaced on every save or delete of a
contract, SLA policy or objective (`retire_terms_answers`, wired in usage.apps).

Staff queries over every tenant use the global version, which every store also replaces. A version
missing from the cache (evicted, expired, cache restarted) is created afresh, which again only
causes misses. The versions and answers live in Django's default cache: Redis when `CACHE_URL`
is set, which every deployment with more than one process needs (docker compose sets it); the
in-process memory cache is right only where one process serves and ingests, as with embedded chDB.
`USAGE_ANSWER_CACHE_SECONDS` bounds how long an answer is kept (0 turns the cache off).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from django.conf import settings
from django.core.cache import cache

from .selectors import UsageFilter

T = TypeVar("T")

EVERY_TENANT = "*"
_EPOCH_KEY = "usage:epoch"  # replaced when stored records change for unknown tenants (a rollup rebuild)
_TERMS_KEY = "usage:terms"  # replaced when contracts or SLA terms change (answers that state terms)
_VERSION_KEY = "usage:version:{}"
_ANSWER_KEY = "usage:rendered:{}"  # (version, usage.api.RenderedAnswer)


def bump_data_versions(tenants: Iterable[str]) -> None:
    """New records are stored for these tenants: retire every answer computed for them (and every
    all-tenant answer) before this call."""
    keys = {_VERSION_KEY.format(tenant) for tenant in tenants}
    if not keys:
        return
    keys.add(_VERSION_KEY.format(EVERY_TENANT))
    cache.set_many({key: secrets.token_hex(8) for key in keys}, timeout=None)


def records_stored_receiver(sender: Any, tenants: Iterable[str], **kwargs: Any) -> None:
    """`ingest.events.records_stored`: the stored records change these tenants' answers."""
    bump_data_versions(tenants)


def retire_every_answer() -> None:
    """Stored data changed for any number of tenants: no answer computed before stays reachable."""
    cache.set(_EPOCH_KEY, secrets.token_hex(8), timeout=None)


def retire_terms_answers(*args: Any, **kwargs: Any) -> None:
    """A contract, SLA policy or objective changed: answers that state terms are computed afresh (a
    signal receiver: any arguments)."""
    cache.set(_TERMS_KEY, secrets.token_hex(8), timeout=None)


def cached_answer(
    question: str,
    usage: UsageFilter,
    options: dict[str, Any],
    read: Callable[[], T],
    *,
    states_terms: bool = False,
) -> tuple[T, bool]:
    """`read()`'s answer to `question` over `usage` with `options`, and whether it came from the
    cache (it does when the tenant's data, and with `states_terms` the contract terms, have not
    changed since it was computed).

    One cache round trip on a hit: the versions and the kept answer are read together, and the answer
    counts only if it was computed under the versions read now. Two requests racing to store an
    answer may leave the older version's: the next one misses and recomputes, never sees old data.
    """
    seconds = settings.USAGE_ANSWER_CACHE_SECONDS
    if not seconds:
        return read(), False
    identity = json.dumps(
        [question, usage.tenant, usage.contract, usage.package, usage.start.isoformat(),
         usage.end.isoformat(), usage.rollups, usage.matches_nothing, sorted(options.items())],
        default=str,
    )  # fmt: skip
    answer_key = _ANSWER_KEY.format(hashlib.sha256(identity.encode()).hexdigest())
    version_keys = [_EPOCH_KEY, _VERSION_KEY.format(usage.tenant or EVERY_TENANT)]
    if states_terms:
        version_keys.append(_TERMS_KEY)
    found = cache.get_many([*version_keys, answer_key])
    for key in version_keys:
        if key not in found:  # never set, or evicted: a new version (only misses can follow)
            cache.add(key, secrets.token_hex(8), timeout=None)
            found[key] = cache.get(key)
    version = ":".join(str(found[key]) for key in version_keys)  # before the query: see the module docstring
    stored = found.get(answer_key)
    if stored is not None and stored[0] == version:
        return stored[1], True
    answer = read()
    cache.set(answer_key, (version, answer), timeout=seconds)
    return answer, False
