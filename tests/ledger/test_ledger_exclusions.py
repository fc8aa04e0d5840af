"""Disputes resolved as the customer's own dependency: records excluded from billing, credited exactly."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from billing.models import BillingExclusion, Note
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from tests.factories import signing_agent
from tests.ledger.support import member_client, november_invoice, priced_contract, send, staff_client

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
OUTAGE_NS = int(datetime(2026, 11, 20, 10, tzinfo=UTC).timestamp()) * 10**9


@pytest.fixture
def invoiced(client: Client) -> dict[str, Any]:
    """4 ordinary records, 2 during the customer's outage (1,000 tokens in each), 1 error in it."""
    contract = priced_contract()
    agent = signing_agent(contract)
    ordinary = [agent.record(contract) for _ in range(4)]
    outage = [agent.record(contract, start_ns=OUTAGE_NS + k * 60 * 10**9, tokens_in=1000) for k in range(2)]
    failed = agent.record(contract, start_ns=OUTAGE_NS + 300 * 10**9, status="error")
    send(client, agent, [*ordinary, *outage, failed])
    invoice = november_invoice(contract)
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    lines = {line.dimension: line for line in invoice.lines.filter(kind="usage")}
    # 6 ok records: 6 × 0.05; 2,400 tokens × 0.0002; 6 × 0.09 s × 0.80 = 0.432
    assert {d: line.amount for d, line in lines.items()} == {
        "requests": Decimal("0.30"),
        "tokens_in": Decimal("0.48"),
        "l3_seconds": Decimal("0.43"),
    }
    return {"contract": contract, "lines": lines, "ordinary": ordinary, "outage": outage}


def _dispute(invoiced: dict[str, Any], dimension: str) -> int:
    customer = member_client(invoiced["contract"], f"alice-{dimension}")
    opened = customer.post(
        "/v1/ledger/disputes",
        {"line": invoiced["lines"][dimension].pk, "reason": "our gateway answered 503"},
        "application/json",
    )
    assert opened.status_code == 201, opened.content
    return int(opened.json()["id"])


def _notes() -> list[tuple[str, Decimal]]:
    return [(n.line.dimension if n.line else "", n.amount) for n in Note.objects.order_by("id")]


def test_a_window_and_status_excludes_the_outage_records_and_credits_what_they_were_billed(
    invoiced: dict[str, Any],
) -> None:
    finance = staff_client()
    dispute = _dispute(invoiced, "requests")
    window = {"start": "2026-11-20T10:00:00Z", "end": "2026-11-20T10:10:00+00:00", "status": "ok"}
    resolved = finance.post(
        f"/v1/ledger/disputes/{dispute}/resolve",
        {"decision": "customer_dependency", "comment": "their 503s", "window": window},
        "application/json",
    )
    assert resolved.status_code == 200, resolved.content
    body = resolved.json()
    assert (body["status"], body["credited"]) == ("excluded", "0.64")
    excluded = set(BillingExclusion.objects.values_list("record_id", flat=True))
    assert {str(r) for r in excluded} == {r["record_id"] for r in invoiced["outage"]}  # not the error record
    # requests 0.30 - 4 × 0.05; tokens 0.48 - 400 × 0.0002; l3 0.43 - round(0.36 s × 0.80 = 0.288)
    assert _notes() == [
        ("requests", Decimal("0.10")),
        ("tokens_in", Decimal("0.40")),
        ("l3_seconds", Decimal("0.14")),
    ]
    event = body["history"][-1]
    assert (event["action"], event["actor"]) == ("records_excluded", "finance")
    detail = event["detail"]
    assert (detail["excluded"], detail["already_excluded"], detail["total"]) == (2, 0, "0.64")
    assert detail["selection"] == {"start_ns": OUTAGE_NS, "end_ns": OUTAGE_NS + 600 * 10**9, "status": "ok"}
    assert [c["credit_note"] for c in detail["credits"]] == [n.number for n in Note.objects.order_by("id")]
    again = finance.post(
        f"/v1/ledger/disputes/{dispute}/resolve",
        {"decision": "customer_dependency", "window": window},
        "application/json",
    )
    assert (again.status_code, again.json()["code"]) == (409, "already_resolved")


def test_named_records_already_excluded_are_not_credited_twice(invoiced: dict[str, Any]) -> None:
    finance = staff_client()
    first = _dispute(invoiced, "requests")
    outage_id = invoiced["outage"][0]["record_id"]
    answer = finance.post(
        f"/v1/ledger/disputes/{first}/resolve",
        {"decision": "customer_dependency", "records": [outage_id]},
        "application/json",
    )
    assert answer.json()["credited"] == "0.32"  # 0.05 + 1,000 × 0.0002 + (0.43 - round(0.45 s × 0.80))
    second = _dispute(invoiced, "tokens_in")
    ordinary_id = invoiced["ordinary"][0]["record_id"]
    body = finance.post(
        f"/v1/ledger/disputes/{second}/resolve",
        {"decision": "customer_dependency", "records": [outage_id, ordinary_id]},
        "application/json",
    ).json()
    assert (body["history"][-1]["detail"]["excluded"], body["history"][-1]["detail"]["already_excluded"]) == (
        1,
        1,
    )
    assert body["credited"] == "0.14"  # 0.05 + 100 × 0.0002 + (round(0.45 s × 0.80) - round(0.36 s × 0.80))
    assert _notes() == [
        ("requests", Decimal("0.05")),
        ("tokens_in", Decimal("0.20")),
        ("l3_seconds", Decimal("0.07")),
        ("requests", Decimal("0.05")),
        ("tokens_in", Decimal("0.02")),
        ("l3_seconds", Decimal("0.07")),
    ]
    assert BillingExclusion.objects.count() == 2


def test_bad_selections_and_other_tenants_records_are_refused_and_only_finance_excludes(
    client: Client, invoiced: dict[str, Any]
) -> None:
    finance, dispute = staff_client(), _dispute(invoiced, "requests")
    url = f"/v1/ledger/disputes/{dispute}/resolve"
    other = priced_contract()
    stranger = signing_agent(other, agent_id="agent-2")
    foreign = stranger.record(other, start_ns=OUTAGE_NS)
    send(client, stranger, [foreign])
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"records": ["not-a-uuid"]}, 400, "invalid_request"),
        (
            {"window": {"start": "2026-11-20T10:00:00", "end": "2026-11-20T11:00:00Z", "status": "ok"}},
            400,
            "invalid_request",
        ),
        (
            {"window": {"start": "2026-11-20T11:00:00Z", "end": "2026-11-20T10:00:00Z", "status": "ok"}},
            400,
            "invalid_request",
        ),
        ({}, 400, "invalid_request"),
        ({"records": ["0193a1b2-0000-7000-8000-000000000000"]}, 404, "unknown_records"),
        ({"records": [foreign["record_id"]]}, 404, "unknown_records"),
        (
            {"window": {"start": "2026-11-21T00:00:00Z", "end": "2026-11-22T00:00:00Z", "status": "ok"}},
            409,
            "nothing_to_exclude",
        ),
    ]
    for selection, status, code in cases:
        answer = finance.post(url, {"decision": "customer_dependency", **selection}, "application/json")
        assert (answer.status_code, answer.json().get("code")) == (status, code), (selection, answer.content)
    customer = member_client(invoiced["contract"], "bob")
    denied = customer.post(url, {"decision": "customer_dependency", "records": []}, "application/json")
    assert denied.status_code == 403
    assert not Note.objects.exists() and not BillingExclusion.objects.exists()
