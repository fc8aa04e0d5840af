"""A tiny MoE checkpoint, created once per test session (nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path

import pytest

from compute_agents.checkpoint import create_tiny_model
from tests.compute_agents.model_sizes import SIZES


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tiny-moe")
    create_tiny_model(directory, SIZES)
    return directory
