"""The portal's contract page when a dimension has several price versions: one quota per dimension,
the version in effect now (real ClickHouse usage)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.models import Role
from contracts.models import ContractPrice
from frontend.selectors import current_period
from tests.frontend.support import ingest, member, priced_contract

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


def test_a_contract_with_a_new_price_version_shows_one_quota_per_dimension() -> None:
    start, _ = current_period()
    contract = priced_contract(starts_at=start - timedelta(days=60))  # 10 requests included
    ContractPrice.objects.create(
        contract=contract,
        dimension="requests",
        unit_price=Decimal("0.04"),
        included_quantity=20,
        effective_from=start,
    )
    ingest(contract, 4, start + (timezone.now() - start) / 2)

    response = member(contract.tenant, Role.READ_ONLY).get(
        reverse("portal-contract", kwargs={"code": contract.code})
    )

    assert response.status_code == 200
    [quota] = response.context["quotas"]
    assert (quota.dimension, quota.included, quota.used, quota.left, quota.used_percent) == (
        "requests",
        Decimal(20),
        Decimal(4),
        Decimal(16),
        20,
    )
    assert 'data-testid="quota-left-requests">16<' in response.content.decode()
