"""Sizes of the tiny test model: small enough for fast tests, big enough to route over several experts;
greedy sampling for tests that compare texts."""

from compute_agents.checkpoint import TinySizes
from compute_agents.engine import SamplingParams

SIZES = TinySizes(
    hidden=64, layers=3, experts=8, top_k=2, moe_intermediate=32, heads=4, kv_heads=2, vocab=512
)


def greedy(max_tokens: int) -> SamplingParams:
    """Greedy decoding (temperature 0): the same text every time."""
    return SamplingParams(max_tokens, temperature=0.0)
