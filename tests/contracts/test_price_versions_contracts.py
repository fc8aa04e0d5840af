"""The contract API's quotas when a dimension has several price versions: one row per dimension, the
version in effect now (real ClickHouse usage)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from common.periods import month_bounds, month_of
from contracts.models import ContractPrice
from tests.billing.usage import send
from tests.factories import ContractFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


def test_the_api_shows_one_quota_per_dimension_with_the_version_in_effect(client: Client) -> None:
    now = timezone.now()
    start, _ = month_bounds(month_of(now))
    contract = ContractFactory.create(starts_at=start - timedelta(days=60))
    prices = ContractPrice.objects
    prices.create(contract=contract, dimension="requests", unit_price=Decimal("0.05"), included_quantity=10)
    prices.create(
        contract=contract,
        dimension="requests",
        unit_price=Decimal("0.04"),
        included_quantity=20,
        effective_from=start,
    )
    prices.create(  # not yet in effect
        contract=contract,
        dimension="requests",
        unit_price=Decimal("0.03"),
        included_quantity=30,
        effective_from=now + timedelta(days=40),
    )
    send(contract, 4, int((start + (now - start) / 2).timestamp()) * 10**9)
    client.force_login(get_user_model().objects.create_user("ops", is_staff=True))

    response = client.get(f"/v1/contracts/{contract.code}")

    assert response.status_code == 200, response.content
    assert response.json()["quotas"] == [
        {
            "dimension": "requests",
            "charge_model": "per_unit",
            "unit_price": "0.04000000",
            "included": "20.000000",
            "used": "4.000000",
            "left": "16.000000",
        }
    ]
