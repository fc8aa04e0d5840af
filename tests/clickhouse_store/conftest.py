"""Fixtures for the ClickHouse store tests.

Nothing here picks a chDB path: a pytest process can open only one, and the session's
CLICKHOUSE_URL is chosen before settings load (tests/conftest.py, or the environment).
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from clickhouse_store import query
from clickhouse_store.migrator import apply_migrations

START_NS = 1_764_670_000_123_456_789  # 2025-12-02T10:06:40.123456789Z

BASE_RECORD: dict[str, Any] = {
    "v": 1,
    "record_id": "0193d7a2-5f00-7c3e-9a41-2b7d1e6f0a01",
    "agent_id": "agent-fra-07",
    "seq": 41,
    "tenant": "acme",
    "contract": "ctr-2026-0001",
    "package": "moe-pro-monthly",
    "client_request_id": "req-8f2c91",
    "model_id": "mixtral-8x22b-instruct",
    "weights_sha3": "5f3b0a9c" * 8,
    "start_ns": START_NS,
    "end_ns": START_NS + 842_000_000,
    "clock_drift_us": -12,
    "tokens_in": 512,
    "tokens_out": 128,
    "sla_class": "gold",
    "hops": [
        {"layer": "L1", "node": "edge-fra-1", "latency_us": 850},
        {"layer": "L2", "node": "agg-fra-a", "latency_us": 1200},
        {"layer": "L2", "node": "agg-fra-b", "latency_us": 300},
        {"layer": "L3", "node": "gpu-node-17", "latency_us": 640_000},
    ],
    "experts": [
        {"layer": 0, "expert": 3, "tokens": 320},
        {"layer": 0, "expert": 5, "tokens": 192},
        {"layer": 1, "expert": 3, "tokens": 512},
    ],
    "distinct_experts": 2,
    "expert_tokens": 1024,
    "prefix_cache_hit_tokens": 256,
    "expert_cache_hits": 12,
    "expert_cache_misses": 2,
    "status": "ok",
    "outcome": {"finish_reason": "stop", "quality": {"score": 0.93, "flags": ["short"]}},
}


@pytest.fixture
def ch() -> Iterator[None]:
    """Migrated ClickHouse with an empty usage_records table."""
    apply_migrations()
    query.command("TRUNCATE TABLE usage_records")
    yield


@pytest.fixture
def make_record() -> Callable[..., dict[str, Any]]:
    """A full record format v1 dict; keyword arguments override fields (record_id random by default)."""

    def make(**overrides: Any) -> dict[str, Any]:
        record = copy.deepcopy(BASE_RECORD)
        record["record_id"] = str(uuid.uuid4())
        record.update(overrides)
        return record

    return make


def insertable(record: dict[str, Any]) -> dict[str, Any]:
    """A record's values as `query.insert_rows` takes them (tuples, outcome as JSON text)."""
    values = dict(record)
    values["hops"] = [(h["layer"], h["node"], h["latency_us"]) for h in record["hops"]]
    values["experts"] = [(e["layer"], e["expert"], e["tokens"]) for e in record["experts"]]
    values["outcome"] = "" if record["outcome"] is None else json.dumps(record["outcome"])
    return values


@pytest.fixture
def as_values() -> Callable[[dict[str, Any]], dict[str, Any]]:
    return insertable
