"""Cost attribution from measured layer times and host cost profiles; margins against invoiced revenue."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from agents.models import Agent
from billing.costs import cost_report, suggested_base_fee
from billing.periods import month_bounds
from billing.services import generate_invoice
from catalog.models import HostCostProfile
from contracts.models import ContractPrice
from tests.billing.usage import at, send
from tests.factories import ContractFactory

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]
D = Decimal
NOV = month_bounds("2026-11")


def test_cost_per_request_and_gross_margin_per_contract_package_and_tenant() -> None:
    HostCostProfile.objects.create(
        host_class="h100",
        depreciation_per_hour=D("20000"),
        power_per_hour=D("8000"),
        operations_per_hour=D("7200"),
    )
    priced = ContractFactory.create()
    unpriced = ContractFactory.create()
    for contract, count in ((priced, 10), (unpriced, 4)):
        ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=D("1.00"))
        send(contract, count, at(2026, 11, 4))
        generate_invoice(contract.pk, *NOV, now=datetime(2026, 12, 2, tzinfo=UTC))
    Agent.objects.filter(agent_id=f"agent-{priced.code}").update(host_class="h100")
    Agent.objects.filter(agent_id=f"agent-{unpriced.code}").update(host_class="no-profile")

    # per record: L3 90,000 µs × 28,000/h + L1+L2 3,500 µs × 7,200/h = (2,520,000,000 + 25,200,000) / 3.6e9
    by_contract = {row.key: row for row in cost_report(*NOV)}
    row = by_contract[priced.code]
    assert (row.requests, row.cost, row.cost_per_request, row.revenue) == (
        10,
        D("7.07"),
        D("0.707"),
        D("10.00"),
    )
    assert row.gross_margin == D("0.2930")
    other = by_contract[unpriced.code]
    assert (other.unpriced_requests, other.cost_per_request, other.gross_margin) == (4, None, None)

    by_package = {row.key: row.cost for row in cost_report(*NOV, by="package")}
    assert by_package == {priced.package.code: D("7.07"), unpriced.package.code: D(0)}
    by_tenant = {row.key: row.revenue for row in cost_report(*NOV, by="tenant")}
    assert by_tenant == {priced.tenant.code: D("10.00"), unpriced.tenant.code: D("4.00")}

    assert suggested_base_fee(priced.package, *NOV) == D("9.19")  # 7.07 × 1.3 = 9.191
    with pytest.raises(ValueError, match="group by"):
        cost_report(*NOV, by="agent")


def test_the_cost_report_command(capsys: pytest.CaptureFixture[str]) -> None:
    from django.core.management import CommandError, call_command

    contract = ContractFactory.create()
    send(contract, 2, at(2026, 11, 4))
    call_command("cost_report", "2026-11", "--by", "tenant")
    out = capsys.readouterr().out
    assert contract.tenant.code in out and "2" in out
    with pytest.raises(CommandError, match="not a month"):
        call_command("cost_report", "2026-13")
