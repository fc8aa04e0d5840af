"""Agent-side helpers to build v1 records."""

from __future__ import annotations

import contextlib
from typing import Any

import uuid6

from .validation import PREFIX_CACHE_WRITE_TOKENS, RECORD_VERSION, validate_record


def new_record_id() -> str:
    """A fresh UUIDv7 (time-ordered) in lowercase canonical form."""
    return str(uuid6.uuid7())


def _expert_key(entry: Any) -> tuple[int, int]:
    return (entry["layer"], entry["expert"])


def make_record(**fields: Any) -> dict[str, Any]:
    """Build and validate a v1 record.

    Fills ``v``; ``record_id`` (a new UUIDv7) and ``outcome`` (null) when not given; sorts
    ``experts`` by (layer, expert) and derives ``distinct_experts`` / ``expert_tokens`` from
    them unless given (a given value that disagrees fails with ``inconsistent_totals``); drops
    ``prefix_cache_write_tokens`` when it is 0 (the optional field is present only from 1 on), so
    callers may always pass it. Raises ``RecordError`` on any problem. The timestamp-in-future rule
    is the server's.
    """
    rec: dict[str, Any] = {"v": RECORD_VERSION, **fields}
    rec.setdefault("record_id", new_record_id())
    rec.setdefault("outcome", None)
    writes = rec.get(PREFIX_CACHE_WRITE_TOKENS)
    if type(writes) is int and writes == 0:
        del rec[PREFIX_CACHE_WRITE_TOKENS]
    experts = rec.get("experts")
    if type(experts) is list:
        experts = [dict(e) if isinstance(e, dict) else e for e in experts]
        with contextlib.suppress(TypeError, KeyError):  # left as is: validation reports the bad entry
            experts.sort(key=_expert_key)
        rec["experts"] = experts
        # Bad entries are ignored in the sums: validation reports them before any total.
        rec.setdefault("distinct_experts", len(experts))
        rec.setdefault(
            "expert_tokens",
            sum(e["tokens"] for e in experts if isinstance(e, dict) and type(e.get("tokens")) is int),
        )
    else:
        rec.setdefault("distinct_experts", 0)
        rec.setdefault("expert_tokens", 0)
    hops = rec.get("hops")
    if type(hops) is list:
        rec["hops"] = [dict(h) if isinstance(h, dict) else h for h in hops]
    validate_record(rec)
    return rec
