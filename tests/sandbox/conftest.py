"""The tiny MoE checkpoint the simulator's agent serves (the compute_agents tests' one)."""

from tests.compute_agents.conftest import tiny_model

__all__ = ["tiny_model"]
