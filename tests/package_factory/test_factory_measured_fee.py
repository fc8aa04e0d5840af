"""Once a built package serves, its measured cost suggests a base fee beside the upload-time quote
(billing.costs.suggested_base_fee), on the portal's build page too."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.urls import reverse

from agents.models import Agent
from catalog.models import HostCostProfile
from package_factory.models import PackageBuild
from package_factory.selectors import measured_base_fee, sandbox_base_fee
from sandbox.models import Sandbox
from tests.api.conftest import member_client, token_client
from tests.billing.usage import at, ingest, send
from tests.factories import ContractFactory, TenantFactory, signing_agent
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


def test_the_cost_per_event_measured_in_a_sandbox_quotes_the_base_fee() -> None:
    HostCostProfile.objects.create(
        host_class="h100",
        currency="CNY",
        depreciation_per_hour=Decimal(20000),
        power_per_hour=Decimal(8000),
        operations_per_hour=Decimal(7200),
    )
    tenant = TenantFactory.create()
    owner = token_client(tenant)
    built = upload(owner, linear_model(), declaration() | {"host_class": "h100"})
    assert built.status_code == 201, built.content
    build = PackageBuild.objects.get()
    window = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))
    assert sandbox_base_fee(build, *window) is None  # nothing served in a sandbox yet

    opened = owner.post("/v1/sandbox", {"packages": [build.package.code]}, content_type="application/json")
    assert opened.status_code == 201, opened.content
    sandbox = Sandbox.objects.select_related("contract").get()
    agent = signing_agent(sandbox.contract)
    Agent.objects.filter(agent_id=agent.agent_id).update(host_class="h100")
    ingest(agent, [agent.record(sandbox.contract, package=build.package.code) for _ in range(4)])

    # Per call: L3 90,000 µs × 28,000/h + L1+L2 3,500 µs × 7,200/h = 0.707 CNY; × 3.6M events × 1.3.
    quote = sandbox_base_fee(build, *window)
    assert quote is not None and (quote.calls, quote.cost_per_event) == (4, Decimal("0.707"))
    assert quote.base_fee == Decimal("3308760.00")
    assert quote.formula == "0.7070000000 × 3600000 × 1.3 = 3308760.00 CNY"
    assert measured_base_fee(build, "2026-11") == Decimal(0)  # production's cost: no sandbox record in it
    page = member_client(tenant).get(reverse("portal-factory-build", args=[build.package.code]))
    assert "3308760.00 CNY" in page.content.decode()  # the records of mid-November: within the last 30 days
