"""The tiny MoE checkpoint the agent loads beside the ONNX capabilities (the compute_agents tests' one)."""

from tests.compute_agents.conftest import tiny_model

__all__ = ["tiny_model"]
