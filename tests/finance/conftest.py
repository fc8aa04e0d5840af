from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.billing.usage import forget_agents


@pytest.fixture(autouse=True)
def _fresh_agents() -> Iterator[None]:
    forget_agents()
    yield
    forget_agents()
