"""A tiny MoE checkpoint, created once per test session (nothing is downloaded) and signed by the tests'
publisher (tests.compute_agents.publisher)."""

from __future__ import annotations

from pathlib import Path

import pytest

from compute_agents.checkpoint import create_tiny_model
from tests.compute_agents.model_sizes import SIZES
from tests.compute_agents.publisher import publish


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny-moe")
    create_tiny_model(directory, SIZES)
    return publish(directory)
