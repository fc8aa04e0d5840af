"""Exceptions and the stable reason codes shared by agents, the platform and the docs."""

from __future__ import annotations

from typing import Any

# Per-record reason codes (returned to agents in the ingest answer's ``rejections``).
MALFORMED_RECORD = "malformed_record"
NON_CANONICAL = "non_canonical"
UNSUPPORTED_VERSION = "unsupported_version"
MISSING_FIELD = "missing_field"
UNKNOWN_FIELD = "unknown_field"
WRONG_TYPE = "wrong_type"
INVALID_VALUE = "invalid_value"
NEGATIVE_VALUE = "negative_value"
INCONSISTENT_TOTALS = "inconsistent_totals"
# Record format v2 (the serving tree): the router's decision and the executor's signature.
DECISION_MISMATCH = "decision_mismatch"
DECISION_SIGNATURE_INVALID = "decision_signature_invalid"
EXECUTOR_SIGNATURE_INVALID = "executor_signature_invalid"

RECORD_ERROR_CODES: frozenset[str] = frozenset(
    {
        MALFORMED_RECORD,
        NON_CANONICAL,
        UNSUPPORTED_VERSION,
        MISSING_FIELD,
        UNKNOWN_FIELD,
        WRONG_TYPE,
        INVALID_VALUE,
        NEGATIVE_VALUE,
        INCONSISTENT_TOTALS,
        DECISION_MISMATCH,
        DECISION_SIGNATURE_INVALID,
        EXECUTOR_SIGNATURE_INVALID,
    }
)

# Batch-level error codes: the whole batch is refused with this HTTP status.
MALFORMED_BATCH = "malformed_batch"
HEADER_MISMATCH = "header_mismatch"
MERKLE_MISMATCH = "merkle_mismatch"
BAD_SIGNATURE = "bad_signature"
BATCH_TOO_LARGE = "batch_too_large"

BATCH_ERROR_STATUS: dict[str, int] = {
    MALFORMED_BATCH: 400,
    HEADER_MISMATCH: 400,
    MERKLE_MISMATCH: 400,
    BAD_SIGNATURE: 401,
    BATCH_TOO_LARGE: 413,
}


class TreemeterRecordsError(Exception):
    """Base class of every exception raised by ``treemeter_records``."""


class CanonicalEncodingError(TreemeterRecordsError, ValueError):
    """A value has no canonical encoding (a float, a non-string key, an unsupported type...)."""


class RecordError(TreemeterRecordsError, ValueError):
    """One usage record is invalid; ``code`` is one of ``RECORD_ERROR_CODES``."""

    def __init__(self, code: str, field: str | None, message: str) -> None:
        super().__init__(f"{code}: {message}" if field is None else f"{code} ({field}): {message}")
        self.code = code
        self.field = field
        self.message = message


class BatchError(TreemeterRecordsError):
    """The whole batch is refused; ``http_status`` is what the ingest endpoint answers."""

    def __init__(self, code: str, message: str, http_status: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.http_status = BATCH_ERROR_STATUS.get(code, 400) if http_status is None else http_status


class IngestError(TreemeterRecordsError):
    """Base class of the client's errors."""


class IngestRejected(IngestError):
    """The server refused the batch with a non-retryable 4xx; sending it again will not help."""

    def __init__(self, status: int, code: str | None, message: str, body: Any) -> None:
        super().__init__(f"HTTP {status} {code}: {message}" if code else f"HTTP {status}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body


class IngestUnavailable(IngestError):
    """Every attempt failed with a retryable error (network, timeout, 5xx, 429)."""

    def __init__(self, message: str, attempts: int, last_status: int | None = None) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.last_status = last_status
