"""What one answered ingest batch adds to the platform's Prometheus instruments (metrics.instruments)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from metrics.instruments import INGEST_BATCH_SECONDS, INGEST_BATCHES, INGEST_RECORDS, INGEST_REJECTIONS


def count_answer(status: int, body: dict[str, Any], seconds: float, *, replayed: bool) -> None:
    """Count a batch answer (the view's JSON body, answered or refused) and its latency. A replayed
    batch gets its first answer again: counted as a `replay` batch, its records not a second time."""
    code = "replay" if replayed else str(body.get("code", "ok"))
    INGEST_BATCHES.labels(str(status), code).inc()
    INGEST_BATCH_SECONDS.observe(seconds)
    if replayed:
        return
    for outcome in ("accepted", "duplicate", "rejected"):
        value = body.get(outcome)
        if type(value) is int and value:
            INGEST_RECORDS.labels(outcome).inc(value)
    reasons = Counter(str(r.get("code")) for r in body.get("rejections", ()) if isinstance(r, dict))
    for reason, count in reasons.items():
        INGEST_REJECTIONS.labels(reason).inc(count)
