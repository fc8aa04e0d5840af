"""Once a built package serves, its measured cost suggests a base fee beside the upload-time quote
(billing.costs.suggested_base_fee), on the portal's build page too."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from agents.models import Agent
from catalog.models import HostCostProfile
from package_factory.models import PackageBuild
from package_factory.selectors import measured_base_fee
from tests.api.conftest import member_client, token_client
from tests.billing.usage import at, send
from tests.factories import ContractFactory, TenantFactory
from tests.package_factory.onnx_models import linear_model
from tests.package_factory.test_factory_api import declaration, upload

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]


def test_the_measured_cost_of_a_month_suggests_the_base_fee() -> None:
    HostCostProfile.objects.create(
        host_class="h100",
        currency="CNY",
        depreciation_per_hour=Decimal(20000),
        power_per_hour=Decimal(8000),
        operations_per_hour=Decimal(7200),
    )
    tenant = TenantFactory.create()
    assert (
        upload(token_client(tenant), linear_model(), declaration() | {"host_class": "h100"}).status_code
        == 201
    )
    build = PackageBuild.objects.get()
    assert measured_base_fee(build, "2026-11") == Decimal(0)  # no traffic yet

    contract = ContractFactory.create(tenant=tenant, package=build.package)
    send(contract, 10, at(2026, 11, 4))
    Agent.objects.filter(agent_id=f"agent-{contract.code}").update(host_class="h100")

    # per record: L3 90,000 µs × 28,000/h + L1+L2 3,500 µs × 7,200/h; 10 records cost 7.07; × 1.3
    assert measured_base_fee(build, "2026-11") == Decimal("9.19")
    page = member_client(tenant).get(reverse("portal-factory-build", args=[build.package.code]))
    assert 'data-testid="measured-fee"' in page.content.decode()
