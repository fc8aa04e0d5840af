"""Per-record rejection codes of ingest, and how a rejection is kept without failing on its input.

The record format's own codes (malformed_record, wrong_type, …) live in treemeter_records.errors;
these are the platform's: they depend on what is registered and already stored.
"""

from __future__ import annotations

import hashlib
from typing import Any

from treemeter_records.limits import FIELD_PATH_MAX, RECORD_ID_LENGTH

UNKNOWN_CONTRACT = "unknown_contract"
PACKAGE_MISMATCH = "package_mismatch"
NOT_BOUND = "not_bound"
DUPLICATE_RECORD_ID = "duplicate_record_id"
RECORD_ID_REUSED = "record_id_reused"
SEQ_CONFLICT = "seq_conflict"
TIMESTAMP_OUT_OF_WINDOW = "timestamp_out_of_window"
# Record format v2: the router whose decision a record carries (ingest.routing).
UNKNOWN_ROUTER_KEY = "unknown_router_key"
ROUTER_KEY_REVOKED = "router_key_revoked"
ROUTER_NOT_BOUND = "router_not_bound"

_HASHED_PREFIX = "sha256:"
REJECTED_ID_MAX = len(_HASHED_PREFIX) + 64
"""A rejected record's id as kept: the id itself, or sha256:<64 hex> of one that does not fit."""
MESSAGE_MAX = 1024


def kept_record_id(raw: Any) -> str:
    """The id of a rejected record as stored and answered: itself when it is a string of at most
    RECORD_ID_LENGTH characters without control characters, else the SHA-256 of its text ('' if none)."""
    if type(raw) is not str or not raw:
        return ""
    if len(raw) <= RECORD_ID_LENGTH and raw.isprintable():
        return raw
    return _HASHED_PREFIX + hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


def _printable(text: str, limit: int) -> str:
    """Control characters (and NUL, which PostgreSQL text cannot hold) escaped; cut to `limit`."""
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def rejection(seq: int | None, record_id: Any, code: str, field: str | None, message: str) -> dict[str, Any]:
    """One rejection as answered to the agent and kept in RejectedRecord: it fits every column."""
    return {
        "seq": seq,
        "record_id": kept_record_id(record_id),
        "code": code,
        "field": _printable(field or "", FIELD_PATH_MAX),
        "message": _printable(message, MESSAGE_MAX),
    }
