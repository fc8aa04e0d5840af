"""The serving tree's subtrees over time, from the records' signed decisions: what the scheduler page
draws beside the scheduler's own events."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import NamedTuple

from .. import query

# Per subtree (the decision's claim) and bucket: answers, their P99 (arrival to answer), the requests
# in flight on average (the answers' summed latency over the bucket's length, Little's law) and the
# mean wait in the router's line.
_TIMELINE_SQL = (
    "SELECT JSONExtractString(decision, 'claims', 'subtree') AS subtree, "  # noqa: S608
    "toUnixTimestamp(toStartOfInterval(start_time, toIntervalSecond({bucket:UInt32}))) AS bucket, "
    "count(), quantileExact(0.99)(end_ns - start_ns) / 1e6, "
    "sum(end_ns - start_ns) / ({bucket:UInt32} * 1e9), avg(queue_latency_us) / 1e3 "
    f"FROM {query.RECORDS} "
    "WHERE status = 'ok' AND decision != '' "
    "AND start_time >= {start:DateTime64(9, 'UTC')} AND start_time < {end:DateTime64(9, 'UTC')} "
    "GROUP BY subtree, bucket ORDER BY subtree, bucket"
)


class SubtreeBucket(NamedTuple):
    subtree: str
    start: datetime
    answers: int
    p99_ms: float
    in_flight: float
    queue_ms: float


def subtree_timeline(start: datetime, end: datetime, bucket_s: int) -> list[SubtreeBucket]:
    """The successful routed requests of [start, end) per subtree and ``bucket_s`` bucket, in order."""
    rows = query.select(_TIMELINE_SQL, {"start": start, "end": end, "bucket": bucket_s})
    return [
        SubtreeBucket(s, datetime.fromtimestamp(int(b), UTC), int(n), float(p), float(f), float(q))
        for s, b, n, p, f, q in rows
    ]
