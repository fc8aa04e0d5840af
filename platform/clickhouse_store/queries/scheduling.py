"""The serving tree's subtrees over time, from the records' signed decisions: what the scheduler page
(every tenant) and the portal's usage page (one tenant's records) draw beside the scheduler's events."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import NamedTuple

from .. import query
from .usage import UsageScope, scope_conditions


def _timeline_sql(where: str) -> str:
    """Per subtree (the decision's claim) and bucket: answers, their P99 (arrival to answer), the
    requests in flight on average (the answers' summed latency over the bucket's length, Little's law),
    the mean wait in the router's line, and the routers that decided them."""
    return (
        "SELECT JSONExtractString(decision, 'claims', 'subtree') AS subtree, "  # noqa: S608
        "toUnixTimestamp(toStartOfInterval(start_time, toIntervalSecond({bucket:UInt32}))) AS bucket, "
        "count(), quantileExact(0.99)(end_ns - start_ns) / 1e6, "
        "sum(end_ns - start_ns) / ({bucket:UInt32} * 1e9), avg(queue_latency_us) / 1e3, "
        "arraySort(groupUniqArray(JSONExtractString(decision, 'claims', 'router'))) "
        f"FROM {query.RECORDS} "
        f"WHERE status = 'ok' AND decision != '' AND {where} "
        "GROUP BY subtree, bucket ORDER BY subtree, bucket"
    )


class SubtreeBucket(NamedTuple):
    subtree: str
    start: datetime
    answers: int
    p99_ms: float
    in_flight: float
    queue_ms: float
    routers: tuple[str, ...]


def subtree_timeline(scope: UsageScope, bucket_s: int) -> list[SubtreeBucket]:
    """The successful routed requests of ``scope`` (its tenant, contract, package and [start, end); a
    tenant of None: every tenant) per subtree and ``bucket_s`` bucket, in order."""
    where, params = scope_conditions(scope, "start_time", "DateTime64(9, 'UTC')")
    rows = query.select(_timeline_sql(where), {**params, "bucket": bucket_s})
    return [
        SubtreeBucket(s, datetime.fromtimestamp(int(b), UTC), int(n), float(p), float(f), float(q), tuple(r))
        for s, b, n, p, f, q, r in rows
    ]
