"""IngestClient retry behaviour against a fake server (httpx.MockTransport)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from treemeter_records import (
    IngestClient,
    IngestError,
    IngestRejected,
    IngestUnavailable,
    SignedBatch,
    build_batch,
)

from .conftest import FIXED_CREATED_NS

Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture
def batch(three_records: list[dict[str, Any]], fixed_key: Ed25519PrivateKey) -> SignedBatch:
    return build_batch(three_records, "agent-eu1.gpu-07", fixed_key, created_ns=FIXED_CREATED_NS)


def _ok(batch: SignedBatch) -> httpx.Response:
    return httpx.Response(
        200,
        json={"batch": batch.header_digest, "accepted": 3, "duplicate": 0, "rejected": 0, "rejections": []},
    )


class Fake:
    """Replays scripted responses (or raises scripted exceptions) and records requests."""

    def __init__(self, *script: httpx.Response | Exception) -> None:
        self.script = list(script)
        self.requests: list[httpx.Request] = []
        self.sleeps: list[float] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        item = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(item, Exception):
            raise item
        return item

    def client(self, **kwargs: Any) -> IngestClient:
        http = httpx.Client(transport=httpx.MockTransport(self.handler))
        return IngestClient("https://platform.test/", http=http, sleep=self.sleeps.append, **kwargs)


def test_retries_503_then_succeeds(batch: SignedBatch) -> None:
    fake = Fake(httpx.Response(503, json={"code": "unavailable"}), _ok(batch))
    answer = fake.client().send(batch)
    assert (answer.batch, answer.accepted, answer.duplicate, answer.rejected) == (
        batch.header_digest,
        3,
        0,
        0,
    )
    assert answer.status_code == 200 and answer.rejections == []
    assert len(fake.requests) == 2 and len(fake.sleeps) == 1
    request = fake.requests[-1]
    assert request.method == "POST"
    assert str(request.url) == "https://platform.test/v1/ingest/batches"
    assert request.headers["content-type"] == "application/x-ndjson"
    assert request.content == batch.body()
    assert fake.requests[0].content == fake.requests[1].content  # the replay is byte-identical


def test_does_not_retry_400(batch: SignedBatch) -> None:
    fake = Fake(
        httpx.Response(400, json={"code": "merkle_mismatch", "message": "records do not hash"}), _ok(batch)
    )
    with pytest.raises(IngestRejected) as info:
        fake.client().send(batch)
    assert (info.value.status, info.value.code, info.value.message) == (
        400,
        "merkle_mismatch",
        "records do not hash",
    )
    assert info.value.body == {"code": "merkle_mismatch", "message": "records do not hash"}
    assert len(fake.requests) == 1 and fake.sleeps == []


@pytest.mark.parametrize("status", [401, 403, 404, 409, 413, 422])
def test_other_4xx_are_final(batch: SignedBatch, status: int) -> None:
    fake = Fake(httpx.Response(status, json={"error": {"code": "nope", "message": "no"}}))
    with pytest.raises(IngestRejected) as info:
        fake.client().send(batch)
    assert (info.value.status, info.value.code) == (status, "nope")
    assert len(fake.requests) == 1


def test_honours_max_attempts(batch: SignedBatch) -> None:
    fake = Fake(httpx.Response(503))
    with pytest.raises(IngestUnavailable) as info:
        fake.client(max_attempts=3).send(batch)
    assert info.value.attempts == 3 and info.value.last_status == 503
    assert len(fake.requests) == 3 and len(fake.sleeps) == 2


def test_single_attempt(batch: SignedBatch) -> None:
    fake = Fake(httpx.Response(500))
    with pytest.raises(IngestUnavailable):
        fake.client(max_attempts=1).send(batch)
    assert len(fake.requests) == 1 and fake.sleeps == []
    with pytest.raises(ValueError):
        IngestClient("https://x", max_attempts=0)


def test_retries_network_errors_and_timeouts(batch: SignedBatch) -> None:
    fake = Fake(httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), httpx.Response(502), _ok(batch))
    assert fake.client().send(batch).accepted == 3
    assert len(fake.requests) == 4 and len(fake.sleeps) == 3


def test_network_errors_exhaust(batch: SignedBatch) -> None:
    fake = Fake(httpx.ConnectError("refused"))
    with pytest.raises(IngestUnavailable, match="ConnectError") as info:
        fake.client(max_attempts=2).send(batch)
    assert info.value.last_status is None


def test_429_honours_retry_after(batch: SignedBatch) -> None:
    fake = Fake(httpx.Response(429, headers={"Retry-After": "7"}), _ok(batch))
    fake.client().send(batch)
    assert fake.sleeps == [7.0]


def test_retry_after_is_capped(batch: SignedBatch) -> None:
    fake = Fake(httpx.Response(503, headers={"Retry-After": "100000"}), _ok(batch))
    fake.client(max_retry_after=30.0).send(batch)
    assert fake.sleeps == [30.0]


def test_retry_after_http_date_in_the_past(batch: SignedBatch) -> None:
    fake = Fake(httpx.Response(503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}), _ok(batch))
    fake.client().send(batch)
    assert fake.sleeps == [0.0]


def test_exponential_backoff_with_jitter(batch: SignedBatch) -> None:
    fake = Fake(httpx.Response(503))
    with pytest.raises(IngestUnavailable):
        fake.client(max_attempts=5, backoff_base=1.0, backoff_max=5.0).send(batch)
    assert len(fake.sleeps) == 4
    for attempt, delay in enumerate(fake.sleeps, start=1):
        ceiling = min(5.0, 2.0 ** (attempt - 1))
        assert ceiling / 2 <= delay <= ceiling


def test_success_body_must_be_json(batch: SignedBatch) -> None:
    fake = Fake(httpx.Response(200, content=b"ok"))
    with pytest.raises(IngestError):
        fake.client().send(batch)


def test_send_raw_bytes_and_context_manager(batch: SignedBatch) -> None:
    fake = Fake(_ok(batch))
    with fake.client() as client:
        assert client.send(batch.body()).batch == batch.header_digest
