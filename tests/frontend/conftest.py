"""The real HTTP webhook receiver of the webhooks tests, for replaying deliveries from the portal."""

from tests.webhooks.conftest import receiver  # noqa: F401
