from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.billing.fake_stripe import SECRET, FakeStripe, fake_stripe
from tests.billing.usage import forget_agents


@pytest.fixture(autouse=True)
def _fresh_agents() -> Iterator[None]:
    forget_agents()
    yield
    forget_agents()


@pytest.fixture
def stripe_api(settings: Any) -> Iterator[FakeStripe]:
    """The local fake of Stripe's API, with the settings pointed at it and the webhook secret set."""
    with fake_stripe() as fake:
        settings.STRIPE_API_KEY = "sk_test_fake"
        settings.STRIPE_API_BASE = fake.url
        settings.STRIPE_WEBHOOK_SECRET = SECRET
        yield fake
