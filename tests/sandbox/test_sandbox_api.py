"""A tenant's sandbox (issue 19.3): opened on a combination of packages, its own keys, its records kept
apart at ingest, its three core figures, its projected invoice (a preview), its reset; refusals with
codes; other tenants see nothing of it. Real ingest, PostgreSQL and ClickHouse."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from billing.models import Invoice
from clickhouse_store.queries.records import count_records
from clickhouse_store.queries.sandbox import sandbox_figures
from contracts.models import Contract
from sandbox.models import Sandbox
from sandbox.selectors import projected_invoice, sandbox_metrics
from tests.api.conftest import token_client
from tests.billing.composed import DAY, call
from tests.billing.usage import ingest
from tests.factories import TenantFactory, signing_agent
from tests.sandbox.support import production_with_packages

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]
NOW = datetime(2026, 11, 16, tzinfo=UTC)  # half of November gone
NOV = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))


def timed(ms: int, at: list[int] = [0]) -> dict[str, Any]:  # noqa: B006 - a counter across calls
    """A call's start (a second after the one before, on 10 November) and end, `ms` later."""
    at[0] += 1
    start = DAY + at[0] * 10**9
    return {"start_ns": start, "end_ns": start + ms * 10**6}


def opened(contract: Contract, **body: Any) -> dict[str, Any]:
    answer = token_client(contract.tenant).post(
        "/v1/sandbox", {"packages": ["supplier", "logistics"], **body}, content_type="application/json"
    )
    assert answer.status_code == 201, answer.content
    return answer.json()


def test_a_sandbox_is_its_own_contract_its_records_are_stored_apart_and_measured() -> None:
    production = production_with_packages()
    body = opened(production, daily_events=200)
    sandbox = Sandbox.objects.get(tenant=production.tenant)
    assert (body["packages"], body["daily_events"]) == (["supplier", "logistics"], 200)
    assert body["currency"] == "CNY"
    assert sandbox.contract.sandbox and sandbox.contract.base_fee == Decimal("140.00")
    assert set(sandbox.simulator_keys) == {"supplier", "logistics"}
    # The sandbox contract is not among the tenant's contracts.
    listed = token_client(production.tenant).get("/v1/contracts").json()["results"]
    assert [c["code"] for c in listed] == [production.code]

    key = token_client(production.tenant).post(
        "/v1/sandbox/keys", {"package": "supplier"}, content_type="application/json"
    )
    assert key.status_code == 201 and key.json()["api_key"].startswith("tmk_")

    agent = signing_agent(production, sandbox.contract)
    box = sandbox.contract
    ingest(
        agent,
        [
            call(agent, box, "po-1", "ocr", **timed(100)),
            call(agent, box, "po-1", "clauses", outcome={"f1": "0.95"}, **timed(300)),
            call(agent, box, "po-2", "ocr", **timed(100)),
            call(agent, box, "po-2", "clauses", outcome={"f1": "0.70"}, **timed(300)),
            call(agent, box, "ship-1", "ocr", package="logistics", **timed(100)),
            call(agent, box, "ship-1", "routes", package="logistics", outcome={"on_time": 1}, **timed(200)),
            call(agent, production, "po-9", "ocr"),  # the same batch: production's record
        ],
    )
    assert count_records(box.code, *NOV) == (0, 0)  # none in usage_records
    assert count_records(production.code, *NOV) == (1, 1)
    assert sandbox_figures(production.tenant.code, box.code, *NOV).records == 6

    metrics = sandbox_metrics(sandbox, NOW)
    assert (metrics.records, metrics.served, metrics.events, metrics.accepted) == (6, 6, 3, 2)
    assert metrics.acceptance_rate == Decimal("0.6667")
    assert (metrics.p50_ms, metrics.p99_ms) == (200.0, 300.0)
    assert [(day.isoformat(), n) for day, n in metrics.daily] == [("2026-11-10", 6)]
    answer = token_client(production.tenant).get("/v1/sandbox").json()  # this month's: December's, none
    assert answer["metrics"]["records"] == 0 and answer["contract"] == box.code

    # Half the month measured: the projection doubles it. Supplier alone: 4 requests → 8 × 0.50 + 100.00.
    supplier = projected_invoice(sandbox, ["supplier"], NOW)
    assert supplier.factor == Decimal(2)
    assert [(x.dimension, x.quantity, x.amount) for x in supplier.invoice.lines] == [
        ("requests", Decimal(8), Decimal("4.00")),
        ("", Decimal(1), Decimal("100.00")),
    ]
    both = projected_invoice(sandbox, [], NOW)
    assert both.packages == ["supplier", "logistics"] and both.invoice.subtotal == Decimal("146.00")
    preview = token_client(production.tenant).get("/v1/sandbox/projection?packages=supplier").json()
    assert preview["preview"] is True and preview["packages"] == ["supplier"]
    assert not Invoice.objects.exists()  # a preview: nothing saved

    reset = token_client(production.tenant).post("/v1/sandbox/reset", content_type="application/json")
    assert reset.status_code == 200 and reset.json()["metrics"]["records"] == 0
    assert sandbox_figures(production.tenant.code, box.code, *NOV).records == 0
    assert count_records(production.code, *NOV) == (1, 1)  # production's untouched


def test_refusals_name_the_problem_and_other_tenants_see_nothing() -> None:
    production = production_with_packages()
    owner = token_client(production.tenant)
    assert owner.get("/v1/sandbox").json()["code"] == "sandbox_not_found"
    for body, code in (
        ({"packages": []}, "invalid"),
        ({"packages": ["nope"]}, "package_not_available"),
        ({"packages": ["supplier"], "daily_events": 10**6}, "invalid"),
    ):
        answer = owner.post("/v1/sandbox", body, content_type="application/json")
        assert answer.status_code in (400, 404) and code in answer.json()["code"], (body, answer.json())
    opened(production)
    again = owner.post("/v1/sandbox", {"packages": ["supplier"]}, content_type="application/json")
    assert (again.status_code, again.json()["code"]) == (409, "sandbox_exists")
    wrong = owner.post("/v1/sandbox/keys", {"package": "credit"}, content_type="application/json")
    assert (wrong.status_code, wrong.json()["code"]) == (400, "package_not_in_sandbox")
    projection = owner.get("/v1/sandbox/projection?packages=credit")
    assert (projection.status_code, projection.json()["code"]) == (400, "package_not_in_sandbox")

    outsider = token_client(TenantFactory.create())
    assert outsider.get("/v1/sandbox").status_code == 404
    assert outsider.get("/v1/sandbox/projection").status_code == 404
    assert outsider.post("/v1/sandbox/reset", content_type="application/json").status_code == 404
    assert Sandbox.objects.count() == 1
