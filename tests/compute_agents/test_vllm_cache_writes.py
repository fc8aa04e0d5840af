"""Prefix-cache writes: vLLM's block arithmetic (a pure function, so this runs without vLLM in the main
tier), the torch engine's honest zero, and the OpenAI usage object that carries them."""

from __future__ import annotations

from pathlib import Path

import pytest

from compute_agents.engine import TorchEngine
from compute_agents.vllm_engine import prefix_cache_writes
from compute_agents.wire import usage
from tests.compute_agents.model_sizes import greedy
from tests.compute_agents.publisher import trust


@pytest.mark.parametrize(
    ("prompt", "cached", "block", "written"),
    [
        (300, 0, 128, 256),  # a cold prompt stores its two full blocks; the partial third is not stored
        (300, 128, 128, 128),  # one block read, the second one stored
        (300, 256, 128, 0),  # every full block read: nothing new
        (256, 128, 128, 128),  # vLLM recomputes the last block of a prompt made of full blocks
        (127, 0, 128, 0),  # shorter than a block: nothing to store
        (0, 0, 16, 0),
        (2**32 - 1, 0, 16, 2**32 - 16),
        (100, 112, 16, 0),  # floored at 0, never negative
    ],
)
def test_writes_are_the_full_blocks_beyond_the_cached_prefix(
    prompt: int, cached: int, block: int, written: int
) -> None:
    assert prefix_cache_writes(prompt, cached, block, enabled=True) == written
    if cached <= prompt:
        assert cached + written <= prompt  # hits and writes never exceed the prompt


def test_no_writes_without_prefix_caching() -> None:
    assert prefix_cache_writes(300, 0, 128, enabled=False) == 0
    assert prefix_cache_writes(300, 0, 0, enabled=True) == 0


def test_the_torch_engine_reports_no_prefix_cache(tiny_model: Path) -> None:
    """It has none: a repeated prompt is computed again, nothing is read from or written to one."""
    engine = TorchEngine(tiny_model, trust=trust(tiny_model))
    for _ in range(2):
        generation = engine.generate("the contract review clause " * 20, greedy(2))
        assert generation.tokens_in > 64
        assert (generation.prefix_cache_hit_tokens, generation.prefix_cache_write_tokens) == (0, 0)


def test_usage_carries_cache_writes_beside_cached_tokens() -> None:
    record = {"tokens_in": 512, "tokens_out": 16, "prefix_cache_hit_tokens": 128}
    assert usage(record)["prompt_tokens_details"] == {"cached_tokens": 128, "cache_write_tokens": 0}
    record["prefix_cache_write_tokens"] = 256
    assert usage(record) == {
        "prompt_tokens": 512,
        "completion_tokens": 16,
        "total_tokens": 528,
        "prompt_tokens_details": {"cached_tokens": 128, "cache_write_tokens": 256},
    }
