"""A sandbox month leaves every production figure untouched (issue 19.3): the tenant's invoices (drafts,
re-rated by the invoice run), its usage dashboard answers, its contracts and quotas, its business events,
every finance report, and the contracts the invoice run and the SLA reports take — read before and after a
month of sandbox records from the same agent, and equal. The sandbox's own figures show the records did
land. Real ingest, PostgreSQL, ClickHouse."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from billing.models import Invoice
from billing.tasks import run_invoices
from clickhouse_store.queries.sandbox import sandbox_figures
from common.periods import month_bounds
from contracts.models import Contract, ContractPrice
from finance.views import REPORTS
from sandbox.services import open_sandbox
from sla.tasks import contracts_with_sla
from tests.api.conftest import staff_client, token_client
from tests.billing.composed import call
from tests.billing.usage import ingest
from tests.factories import customer, signing_agent
from tests.sandbox.support import production_with_packages

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]
NOV = month_bounds("2026-11")
DEC_2 = datetime(2026, 12, 2, tzinfo=UTC)
DAYS = {"start": "2026-11-01", "end": "2026-12-01"}
USAGE: tuple[tuple[str, dict[str, str]], ...] = (
    ("timeseries", {"dimension": "requests", "interval": "day"}),
    ("breakdown", {"by": "contract"}),
    ("experts", {}),
    ("routing", {}),
    ("latency", {}),
)


def november(agent: Any, contract: Contract, events: int, prefix: str) -> None:
    records = []
    for n in range(events):
        records += [
            call(agent, contract, f"{prefix}-{n}", "ocr"),
            call(agent, contract, f"{prefix}-{n}", "clauses", outcome={"f1": "0.95" if n % 3 else "0.5"}),
        ]
    ingest(agent, records)


def production_figures(contract: Contract, staff: Client) -> dict[str, Any]:
    run_invoices("2026-11", now=DEC_2)  # the drafts are re-rated: the contract has a grace period
    owner = token_client(contract.tenant)
    figures: dict[str, Any] = {
        "invoices": [
            (i.contract.code, i.status, i.record_count, i.subtotal, i.total, i.terms["quantities"])
            for i in Invoice.objects.select_related("contract").order_by("pk")
        ],
        "contracts": owner.get("/v1/contracts").json(),
        "events": owner.get(f"/v1/contracts/{contract.code}/events?month=2026-11").json(),
        "billed": sorted(c.code for c in Contract.objects.billable()),
        "with_sla": sorted(c.code for c in contracts_with_sla()),
    }
    for endpoint, params in USAGE:
        for client in (owner, staff):
            answer = client.get(f"/v1/usage/{endpoint}", {**DAYS, **params})
            assert answer.status_code == 200, answer.content
            figures[f"usage {endpoint} {client is staff}"] = answer.json()
    for name in REPORTS:
        answer = staff.get(f"/finance/{name}/download.csv")
        assert answer.status_code == 200, (name, answer.content)
        figures[f"finance {name}"] = answer.content
    return figures


def test_a_sandbox_month_leaves_every_production_figure_untouched() -> None:
    production = production_with_packages()
    Contract.objects.filter(pk=production.pk).update(grace_days=10)
    ContractPrice.objects.create(contract=production, dimension="requests", unit_price=Decimal("0.50"))
    ContractPrice.objects.create(contract=production, dimension="supplier_event", unit_price=Decimal("12.50"))
    sandbox = open_sandbox(customer(production.tenant.code), ["supplier", "logistics"])
    agent = signing_agent(production, sandbox.contract)  # one agent serves both
    november(agent, production, 6, "po")
    staff = staff_client()

    before = production_figures(production, staff)
    november(agent, sandbox.contract, 20, "sandbox-po")
    after = production_figures(production, staff)

    # 12 requests × 0.50 + 4 accepted supplier events × 12.50
    assert [row[:5] for row in before["invoices"]] == [
        (production.code, "grace", 12, Decimal("56.00"), Decimal("56.00"))
    ]
    assert sandbox.contract.code not in before["billed"] + before["with_sla"]
    for name, figure in before.items():
        assert after[name] == figure, name
    assert sandbox_figures(production.tenant.code, sandbox.contract.code, *NOV).records == 40
