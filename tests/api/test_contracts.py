"""GET /v1/contracts and /v1/contracts/<code>: quotas and what is left this month, measured in ClickHouse
from real signed records sent through the ingest API."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from common.periods import month_bounds, month_of
from contracts.models import Contract, ContractPrice
from tests.api.conftest import member_client, staff_client, token_client
from tests.billing.usage import send
from tests.factories import ContractFactory, TenantFactory

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]


def this_month_ns() -> int:
    """A record time inside the current month (UTC), in the past."""
    start, _ = month_bounds(month_of(timezone.now()))
    return int((start + timedelta(seconds=1)).timestamp()) * 10**9


def priced_contract(code: str, tenant_code: str = "acme") -> Contract:
    tenant = TenantFactory.create(code=tenant_code)
    contract = ContractFactory.create(code=code, tenant=tenant)
    ContractPrice.objects.create(
        contract=contract, dimension="requests", unit_price=Decimal("0.05"), included_quantity=Decimal(10)
    )
    ContractPrice.objects.create(
        contract=contract, dimension="tokens_in", unit_price=Decimal("0.0001"), included_quantity=Decimal(250)
    )
    return contract


def test_the_contract_shows_its_quotas_and_what_is_left_this_month() -> None:
    contract = priced_contract("acme-main")
    send(contract, 3, this_month_ns())  # 3 requests of 100 input tokens each
    send(contract, 2, this_month_ns(), status="error")  # not billable: not counted

    body = token_client(contract.tenant, "read_only").get("/v1/contracts/acme-main").json()

    assert (body["code"], body["tenant"], body["status"], body["currency"]) == (
        "acme-main",
        "acme",
        "active",
        "CNY",
    )
    assert body["quotas"] == [
        {
            "dimension": "requests",
            "charge_model": "per_unit",
            "unit_price": "0.05000000",
            "included": "10.000000",
            "used": "3.000000",
            "left": "7.000000",
        },
        {
            "dimension": "tokens_in",
            "charge_model": "per_unit",
            "unit_price": "0.00010000",
            "included": "250.000000",
            "used": "300.000000",
            "left": "0.000000",
        },
    ]


def test_the_list_is_the_tenants_own_with_filters() -> None:
    mine = priced_contract("acme-main")
    ContractFactory.create(code="acme-ended", tenant=mine.tenant, status="ended")
    ContractFactory.create(code="other-main", tenant=TenantFactory.create(code="other"))
    send(mine, 4, this_month_ns())
    client = member_client(mine.tenant, "read_only")

    listed = client.get("/v1/contracts").json()["results"]
    assert sorted(c["code"] for c in listed) == ["acme-ended", "acme-main"]
    assert next(c for c in listed if c["code"] == "acme-main")["quotas"][0]["used"] == "4.000000"
    active = client.get("/v1/contracts?status=active").json()["results"]
    assert [c["code"] for c in active] == ["acme-main"]
    bad = client.get("/v1/contracts?status=sleeping")
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_request")
    assert len(staff_client().get("/v1/contracts").json()["results"]) == 3


def test_another_tenants_contract_is_404() -> None:
    priced_contract("acme-main")
    stranger = token_client(TenantFactory.create(code="other"))
    response = stranger.get("/v1/contracts/acme-main")
    assert (response.status_code, response.json()["code"]) == (404, "not_found")
