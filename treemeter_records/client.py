"""Agent-side HTTP client that sends signed batches to the platform."""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson

from .batch import CONTENT_TYPE, SignedBatch
from .errors import IngestError, IngestRejected, IngestUnavailable

INGEST_PATH = "/v1/ingest/batches"


@dataclass(frozen=True, slots=True)
class IngestResponse:
    """The server's answer to an accepted POST (parsed JSON)."""

    status_code: int
    batch: str  # header digest of the batch
    accepted: int
    duplicate: int
    rejected: int
    rejections: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP-date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return None


def _error_fields(body: Any, fallback: str) -> tuple[str | None, str]:
    """(code, message) from the usual error body shapes."""
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            code = err.get("code")
            message = err.get("message") or err.get("detail") or fallback
            return (code if isinstance(code, str) else None), str(message)
    return None, fallback


class IngestClient:
    """Sends ``SignedBatch`` bodies to ``{base_url}/v1/ingest/batches``.

    Connection errors, timeouts, 5xx and 429 are retried with exponential backoff and jitter
    (``Retry-After`` is honoured, capped at ``max_retry_after``), up to ``max_attempts`` tries in
    all, then ``IngestUnavailable`` is raised. Any other 4xx raises ``IngestRejected`` at once.

    Replaying is safe by design: a batch is identified by its header digest and records by
    (agent_id, seq) / record_id, and the server deduplicates, so a batch whose answer was lost
    (timeout after the server committed) can simply be sent again; the replay comes back with
    its records counted as ``duplicate``.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 10.0,
        max_attempts: int = 5,
        backoff_base: float = 0.2,
        backoff_max: float = 30.0,
        max_retry_after: float = 120.0,
        headers: Mapping[str, str] | None = None,
        http: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.url = base_url.rstrip("/") + INGEST_PATH
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.max_retry_after = max_retry_after
        self.headers = {"Content-Type": CONTENT_TYPE, "Accept": "application/json", **(headers or {})}
        self._owns_http = http is None
        self._http = http if http is not None else httpx.Client(timeout=timeout)
        self._sleep = sleep

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> IngestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def backoff(self, attempt: int) -> float:
        """Delay before retry number ``attempt`` (1-based): half fixed, half random ("equal jitter")."""
        ceiling = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 - jitter, not crypto

    def send(self, batch: SignedBatch | bytes) -> IngestResponse:
        """POST the batch; return the parsed answer (see the class docstring for retries)."""
        body = batch.body() if isinstance(batch, SignedBatch) else batch
        last_problem = "no attempt made"
        last_status: int | None = None
        for attempt in range(1, self.max_attempts + 1):
            delay: float | None = None
            try:
                response = self._http.post(self.url, content=body, headers=self.headers, timeout=self.timeout)
            except httpx.TransportError as exc:  # connection errors and timeouts
                last_problem, last_status = f"{type(exc).__name__}: {exc}", None
            else:
                status = response.status_code
                if 200 <= status < 300:
                    return self._parse_success(response)
                payload = _json_or_none(response)
                code, message = _error_fields(payload, response.reason_phrase or f"HTTP {status}")
                if status != 429 and status < 500:
                    detail = payload if payload is not None else response.text
                    raise IngestRejected(status, code, message, detail)
                last_problem, last_status = f"HTTP {status}: {message}", status
                retry_after = _retry_after(response.headers.get("Retry-After"))
                if retry_after is not None:
                    delay = min(retry_after, self.max_retry_after)
            if attempt < self.max_attempts:
                self._sleep(self.backoff(attempt) if delay is None else delay)
        raise IngestUnavailable(
            f"batch not delivered after {self.max_attempts} attempts ({last_problem})",
            attempts=self.max_attempts,
            last_status=last_status,
        )

    @staticmethod
    def _parse_success(response: httpx.Response) -> IngestResponse:
        payload = _json_or_none(response)
        if not isinstance(payload, dict):
            raise IngestError(f"HTTP {response.status_code} with a non-JSON-object body")
        try:
            return IngestResponse(
                status_code=response.status_code,
                batch=str(payload["batch"]),
                accepted=int(payload.get("accepted", 0)),
                duplicate=int(payload.get("duplicate", 0)),
                rejected=int(payload.get("rejected", 0)),
                rejections=list(payload.get("rejections") or []),
                raw=payload,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise IngestError(f"unexpected ingest answer: {exc}") from exc
