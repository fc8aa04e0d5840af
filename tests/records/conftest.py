"""Shared fixtures for treemeter_records tests (no Django needed)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from treemeter_records import canonical_bytes, key_id_for, merkle_root_of, private_key_from_seed, sign_header

# The fixed, fully specified v1 record of the test vectors (also the worked example in
# docs/record-format.md). Non-ASCII, a control character and quotes sit in client_request_id.
FIXED_RECORD: dict[str, Any] = {
    "v": 1,
    "record_id": "01936f4e-8a2b-7c3d-9e4f-5a6b7c8d9e0f",
    "agent_id": "agent-eu1.gpu-07",
    "seq": 42,
    "tenant": "acme-health",
    "contract": "ctr-2025-001",
    "package": "moe-outcome.gold",
    "sla_class": "gold",
    "client_request_id": 'req-\u03a9-7\u00e9\n"q"',
    "model_id": "mixtral-8x7b-instruct",
    "weights_sha3": "df07a843fead5c3712490304f6d5bc53ff6d8330efd5433fb37ea628cecdf150",
    "start_ns": 1735689600000000000,
    "end_ns": 1735689600250000000,
    "clock_drift_us": -125,
    "tokens_in": 512,
    "tokens_out": 128,
    "hops": [
        {"layer": "L1", "node": "edge-fra-1", "latency_us": 120},
        {"layer": "L2", "node": "router-fra-a", "latency_us": 340},
        {"layer": "L3", "node": "gpu-07", "latency_us": 231000},
        {"layer": "L2", "node": "router-fra-a", "latency_us": 310},
        {"layer": "L1", "node": "edge-fra-1", "latency_us": 95},
    ],
    "experts": [
        {"layer": 0, "expert": 1, "tokens": 300},
        {"layer": 0, "expert": 5, "tokens": 340},
        {"layer": 1, "expert": 2, "tokens": 640},
    ],
    "distinct_experts": 3,
    "expert_tokens": 1280,
    "prefix_cache_hit_tokens": 256,
    "expert_cache_hits": 5,
    "expert_cache_misses": 1,
    "status": "ok",
    "outcome": {"type": "matched_patient", "value": "2000.00", "ref": "case-17", "verified": True, "n": 3},
}
FIXED_SEED = bytes(range(32))
FIXED_CREATED_NS = 1735689601000000000
# "Now" for ingest-side checks of the fixed records: a minute after they ended.

BodyMaker = Callable[..., bytes]


@pytest.fixture
def record() -> dict[str, Any]:
    """A fresh deep copy of the fixed valid record (mutate freely)."""
    return copy.deepcopy(FIXED_RECORD)


@pytest.fixture
def fixed_key() -> Ed25519PrivateKey:
    return private_key_from_seed(FIXED_SEED)


@pytest.fixture
def three_records() -> list[dict[str, Any]]:
    """The three records of the fixed batch vector (seqs 42, 43, 45)."""
    second = copy.deepcopy(FIXED_RECORD)
    second.update(seq=43, record_id="01936f4e-8a2b-7c3d-9e4f-5a6b7c8d9e10", client_request_id="")
    third = copy.deepcopy(FIXED_RECORD)
    third.update(
        seq=45,
        record_id="01936f4e-8a2c-7000-8000-000000000000",
        status="timeout",
        experts=[],
        distinct_experts=0,
        expert_tokens=0,
        outcome=None,
    )
    return [copy.deepcopy(FIXED_RECORD), second, third]


@pytest.fixture
def make_body(fixed_key: Ed25519PrivateKey) -> BodyMaker:
    """Sign arbitrary raw record lines into a body, bypassing build_batch's validation.

    Header fields default to what the lines imply; ``header`` overrides any of them (the
    signature is computed after the override, so the result is validly signed).
    """

    def make(lines: Sequence[bytes], header: dict[str, Any] | None = None, key: Any = None) -> bytes:
        signer = key or fixed_key
        base = {
            "v": 1,
            "agent_id": FIXED_RECORD["agent_id"],
            "key_id": key_id_for(signer),
            "first_seq": 0,
            "last_seq": max(len(lines) - 1, 0),
            "count": len(lines),
            "merkle_root": merkle_root_of(lines).hex(),
            "created_ns": FIXED_CREATED_NS,
        }
        base.update(header or {})
        envelope = canonical_bytes({"header": base, "signature": sign_header(base, signer)})
        return b"\n".join([envelope, *lines]) + b"\n"

    return make
