"""Cost and margin per package and tenant: billing.costs' attribution, revenue per currency, margins
only where cost and revenue share a currency."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from agents.models import Agent
from billing.services import generate_invoice
from billing.settlement import issue_note
from catalog.models import ComputePackage, HostCostProfile
from common.periods import month_bounds
from contracts.models import ContractPrice
from tests.billing.usage import at, send
from tests.factories import ContractFactory, TenantFactory
from tests.finance.support import csv_rows, floats, parquet_table, staff_client

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
D = Decimal
NOV = month_bounds("2026-11")
DEC_2 = datetime(2026, 12, 2, tzinfo=UTC)
FIGURES = ("currency", "requests", "unpriced_requests", "cost", "cost_currency", "cost_per_request")


@pytest.fixture
def served(clickhouse: None) -> None:
    """Per record on an h100: L3 90,000 µs × 28,000/h + L1+L2 3,500 µs × 7,200/h = 0.707 CNY.
    acme: 10 requests in CNY (10.00 billed, 1.00 credited), 4 in USD (4.00); bolt: 2 requests in CNY
    (2.00) on a host class without a cost profile."""
    HostCostProfile.objects.create(
        host_class="h100",
        currency="CNY",
        depreciation_per_hour=D("20000"),
        power_per_hour=D("8000"),
        operations_per_hour=D("7200"),
    )
    acme, bolt = TenantFactory.create(code="acme"), TenantFactory.create(code="bolt")
    small = ComputePackage.objects.create(code="gpu-small", name="Small")
    large = ComputePackage.objects.create(code="gpu-large", name="Large")
    a1 = ContractFactory.create(tenant=acme, package=small)
    a2 = ContractFactory.create(tenant=acme, package=small, currency="USD")
    b1 = ContractFactory.create(tenant=bolt, package=large)
    for contract, count in ((a1, 10), (a2, 4), (b1, 2)):
        ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=D("1.00"))
        send(contract, count, at(2026, 11, 4))
    Agent.objects.filter(agent_id__in=[f"agent-{a1.code}", f"agent-{a2.code}"]).update(host_class="h100")
    Agent.objects.filter(agent_id=f"agent-{b1.code}").update(host_class="no-profile")
    invoice = generate_invoice(a1.pk, *NOV, now=DEC_2)
    issue_note(invoice, "credit", D("1.00"), "goodwill")
    generate_invoice(a2.pk, *NOV, now=DEC_2)
    generate_invoice(b1.pk, *NOV, now=DEC_2)


def _figures(rows: list[dict], by: str) -> list[tuple]:
    return [tuple(row[k] for k in (by, *FIGURES, "revenue", "gross_margin")) for row in rows]


@pytest.mark.usefixtures("served")
def test_cost_and_margin_per_package_and_per_tenant() -> None:
    client = staff_client()
    by_package = client.get("/finance/costs/?month=2026-11&by=package")
    assert by_package.status_code == 200
    assert _figures(by_package.context["table"].rows, "package") == [
        ("gpu-large", "CNY", 2, 2, D("0.00"), "CNY", None, D("2.00"), None),
        ("gpu-small", "CNY", 10, 0, D("7.07"), "CNY", D("0.707000"), D("9.00"), D("0.2144")),
        ("gpu-small", "USD", 4, 0, D("2.83"), "CNY", D("0.707000"), D("4.00"), None),
    ]
    by_tenant = client.get("/finance/costs/?month=2026-11&by=tenant")
    assert _figures(by_tenant.context["table"].rows, "tenant") == [
        ("acme", "CNY", 10, 0, D("7.07"), "CNY", D("0.707000"), D("9.00"), D("0.2144")),
        ("acme", "USD", 4, 0, D("2.83"), "CNY", D("0.707000"), D("4.00"), None),
        ("bolt", "CNY", 2, 2, D("0.00"), "CNY", None, D("2.00"), None),
    ]
    assert floats(by_package.context["table"]) == floats(by_tenant.context["table"]) == []
    html = by_tenant.content.decode()
    assert 'data-testid="finance-costs-table"' in html
    assert "21.44 %" in html


@pytest.mark.usefixtures("served")
def test_cost_downloads_parse_back_to_the_rows() -> None:
    client = staff_client()
    rows = csv_rows(client, "/finance/costs/download.csv?month=2026-11&by=tenant")
    assert [tuple(r.values()) for r in rows] == [
        ("acme", "CNY", "10", "0", "7.07", "0.00", "CNY", "0.707000", "9.00", "0.2144"),
        ("acme", "USD", "4", "0", "2.83", "0.00", "CNY", "0.707000", "4.00", ""),
        ("bolt", "CNY", "2", "2", "0.00", "0.00", "CNY", "", "2.00", ""),
    ]
    table = parquet_table(client, "/finance/costs/download.parquet?month=2026-11&by=tenant")
    assert table.schema.field("cost").type == pa.decimal128(20, 2)
    assert table.schema.field("gross_margin").type == pa.decimal128(10, 4)
    assert [(r["tenant"], r["currency"], r["cost"], r["gross_margin"]) for r in table.to_pylist()] == [
        ("acme", "CNY", D("7.07"), D("0.2144")),
        ("acme", "USD", D("2.83"), None),
        ("bolt", "CNY", D("0.00"), None),
    ]


@pytest.mark.usefixtures("served")
def test_profiles_in_several_currencies_show_no_cost_and_no_margin() -> None:
    HostCostProfile.objects.create(
        host_class="a100",
        currency="USD",
        depreciation_per_hour=D("1"),
        power_per_hour=D("1"),
        operations_per_hour=D("1"),
    )
    response = staff_client().get("/finance/costs/?month=2026-11&by=package")
    rows = response.context["table"].rows
    assert [(r["cost"], r["cost_currency"], r["gross_margin"]) for r in rows] == [(None, "", None)] * 3
    assert 'data-testid="finance-costs-mixed-currency"' in response.content.decode()
