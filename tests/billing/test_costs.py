"""Cost attribution from measured layer times and host cost profiles; margins against invoiced revenue."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from agents.models import Agent
from billing.costs import cost_report, suggested_base_fee
from billing.services import finalize_invoice, generate_invoice
from billing.settlement import issue_note
from catalog.models import HostCostProfile
from common.periods import month_bounds
from contracts.models import ContractPrice
from tests.billing.usage import at, send
from tests.factories import ContractFactory

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]
D = Decimal
NOV = month_bounds("2026-11")
DEC_2 = datetime(2026, 12, 2, tzinfo=UTC)


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
        finalize_invoice(generate_invoice(contract.pk, *NOV, now=DEC_2), now=DEC_2)
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


def test_revenue_is_issued_invoices_net_of_notes_in_the_cost_currency() -> None:
    HostCostProfile.objects.create(  # costs in CNY
        host_class="h100", depreciation_per_hour=D(1), power_per_hour=D(0), operations_per_hour=D(0)
    )
    issued = ContractFactory.create()
    in_dollars = ContractFactory.create(currency="USD")
    in_grace = ContractFactory.create(grace_days=5)  # its invoice is still a draft on 2 December
    for contract in (issued, in_dollars, in_grace):
        ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=D("1.00"))
        send(contract, 10, at(2026, 11, 4))
    invoice = finalize_invoice(generate_invoice(issued.pk, *NOV, now=DEC_2), now=DEC_2)
    issue_note(invoice, "credit", D("2.50"), "goodwill")
    issue_note(invoice, "debit", D("0.50"), "courier fee")
    finalize_invoice(generate_invoice(in_dollars.pk, *NOV, now=DEC_2), now=DEC_2)
    assert generate_invoice(in_grace.pk, *NOV, now=DEC_2).status == "grace"

    revenue = {row.key: row.revenue for row in cost_report(*NOV)}

    # 10 × 1.00 − 2.50 + 0.50; the USD invoice is in another currency, the draft is not issued
    assert revenue == {issued.code: D("8.00"), in_dollars.code: D(0), in_grace.code: D(0)}


def test_the_cost_report_command(capsys: pytest.CaptureFixture[str]) -> None:
    from django.core.management import CommandError, call_command

    contract = ContractFactory.create()
    send(contract, 2, at(2026, 11, 4))
    call_command("cost_report", "2026-11", "--by", "tenant")
    out = capsys.readouterr().out
    assert contract.tenant.code in out and "2" in out
    with pytest.raises(CommandError, match="not a month"):
        call_command("cost_report", "2026-13")
