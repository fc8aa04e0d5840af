"""The fixed v2 record (record format v2's worked example in docs/record-format.md): the v1 fields of
a request an L1 router decided, the router's signed decision, and the executor's signature. Both keys
come from fixed seeds, and Ed25519 signatures are deterministic, so every byte is fixed."""

from __future__ import annotations

from typing import Any

from treemeter_records import private_key_from_seed, protocol, sign_record

ROUTER_SEED = bytes(range(32, 64))
EXECUTOR_SEED = bytes(range(32))
ROUTER_KEY = private_key_from_seed(ROUTER_SEED)
EXECUTOR_KEY = private_key_from_seed(EXECUTOR_SEED)

CLAIMS: dict[str, Any] = {
    "record_id": "01936f4e-8a2b-7c3d-9e4f-5a6b7c8d9e0f",
    "router": "l1-fra-1",
    "node": "l1.3f2a9c0d4b5e6f71",
    "rules_sha256": "3f2a9c0d4b5e6f71" + "0" * 48,
    "domain": "contract_review",
    "confidence_ppm": 912_345,
    "l2_confirmation": False,
    "path": ["L1", "L2", "L3", "L1"],
    "subtree": "legal",
    "executor": "gpu-07",
    "preheat": [[0, 3], [0, 9], [1, 2]],
    "l1_in_us": 850,
    "decided_ns": 1735689600000850000,
}

V1_PART: dict[str, Any] = {
    "v": 1,
    "record_id": CLAIMS["record_id"],
    "agent_id": "gpu-07",
    "seq": 7,
    "tenant": "acme-legal",
    "contract": "ctr-2026-007",
    "package": "contract-review",
    "sla_class": "gold",
    "client_request_id": "req-7",
    "model_id": "qwen3-moe-tiny",
    "weights_sha3": "df07a843fead5c3712490304f6d5bc53ff6d8330efd5433fb37ea628cecdf150",
    "start_ns": 1735689600000000000,
    "end_ns": 1735689600250000000,
    "clock_drift_us": -40,
    "tokens_in": 64,
    "tokens_out": 16,
    "hops": [
        {"layer": "L1", "node": "l1.3f2a9c0d4b5e6f71", "latency_us": 1400},
        {"layer": "L2", "node": "gpu-07.l2", "latency_us": 900},
        {"layer": "L3", "node": "gpu-07.l3", "latency_us": 246000},
        {"layer": "L1", "node": "l1.3f2a9c0d4b5e6f71", "latency_us": 1700},
    ],
    "experts": [{"layer": 0, "expert": 3, "tokens": 79}, {"layer": 0, "expert": 9, "tokens": 79}],
    "distinct_experts": 2,
    "expert_tokens": 158,
    "prefix_cache_hit_tokens": 0,
    "expert_cache_hits": 30,
    "expert_cache_misses": 2,
    "status": "ok",
    "outcome": None,
}


def v2_record() -> dict[str, Any]:
    """A fresh copy of the fixed v2 record."""
    claims = {**CLAIMS, "path": list(CLAIMS["path"]), "preheat": [list(pair) for pair in CLAIMS["preheat"]]}
    decision = protocol.sign_decision(ROUTER_KEY, claims)
    return sign_record({**V1_PART, "hops": [dict(h) for h in V1_PART["hops"]]}, decision, EXECUTOR_KEY)
