"""Past the configured rate a caller gets 429 in the standard error shape, with Retry-After."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import Client
from rest_framework.settings import api_settings
from rest_framework.throttling import UserRateThrottle

from accounts.models import Role
from tests.factories import TenantFactory, api_token_for

pytestmark = pytest.mark.django_db


def test_the_fourth_request_in_a_minute_is_429(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        UserRateThrottle, "THROTTLE_RATES", {**api_settings.DEFAULT_THROTTLE_RATES, "user": "3/min"}
    )
    cache.clear()
    auth = {"Authorization": f"Bearer {api_token_for(TenantFactory.create(), Role.READ_ONLY)}"}
    statuses = [client.get("/v1/ledger/disputes", headers=auth).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    limited = client.get("/v1/ledger/disputes", headers=auth)
    assert limited.json()["code"] == "throttled" and int(limited["Retry-After"]) > 0
