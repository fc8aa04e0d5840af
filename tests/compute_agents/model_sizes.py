"""Sizes of the tiny test model: small enough for fast tests, big enough to route over several experts."""

from compute_agents.checkpoint import TinySizes

SIZES = TinySizes(
    hidden=64, layers=3, experts=8, top_k=2, moe_intermediate=32, heads=4, kv_heads=2, vocab=512
)
