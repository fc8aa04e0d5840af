"""Clients acting as a tenant's members (session) or programs (API token), and Stripe's local fake."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import Role, Tenant
from tests.billing.fake_stripe import FakeStripe, fake_stripe
from tests.factories import MembershipFactory, api_token_for

STRIPE_SECRET = "whsec_api_tests"


def token_client(tenant: Tenant, role: str = Role.OWNER) -> Client:
    """A program: `Authorization: Bearer tmt_…` for a fresh token of `tenant` in `role`."""
    return Client(HTTP_AUTHORIZATION=f"Bearer {api_token_for(tenant, role)}")


def member_client(tenant: Tenant, role: str = Role.OWNER) -> Client:
    """A signed-in user of `tenant` in `role` (the portal's session)."""
    client = Client()
    client.force_login(MembershipFactory.create(tenant=tenant, role=role).user)
    return client


def staff_client() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_user("ops", is_staff=True))
    return client


def post_json(client: Client, url: str, body: Any = None, **headers: str) -> Any:
    return client.post(url, data=body or {}, content_type="application/json", headers=headers)


@pytest.fixture
def stripe_api(settings: Any) -> Iterator[FakeStripe]:
    with fake_stripe() as fake:
        settings.STRIPE_API_KEY = "sk_test_fake"
        settings.STRIPE_API_BASE = fake.url
        settings.STRIPE_WEBHOOK_SECRET = STRIPE_SECRET
        yield fake
