"""A request is billed once however many executors ran it: a retry's signed decision names the
attempts it supersedes (sent, never answered), and rating, the invoice's statement and the finance
reconciliation leave those records out. Real signed v2 records through the real ingest path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from billing.selectors import period_usage
from billing.services import generate_invoice
from common.periods import month_bounds
from contracts.models import Contract
from finance.reconciliation import ReconciliationFilter, reconciliation_rows
from tests.factories import ContractFactory, ContractPriceFactory, SigningAgent, signing_agent
from treemeter_records import new_record_id, protocol, sign_record

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
NOV = month_bounds("2026-11")
NODE = "l1.00112233445566ff"
START_NS = int(datetime(2026, 11, 15, tzinfo=UTC).timestamp()) * 10**9


def _contract(code: str) -> Contract:
    contract = ContractFactory.create(code=code, grace_days=0)
    ContractPriceFactory.create(contract=contract, dimension="requests", unit_price=Decimal("0.05"))
    ContractPriceFactory.create(contract=contract, dimension="tokens_in", unit_price=Decimal("0.0002"))
    return contract


def _attempt(
    executor: SigningAgent, router: SigningAgent, contract: Contract, supersedes: list[str], **fields: Any
) -> dict[str, Any]:
    """One attempt of the request that reached the router at START_NS, decided for ``executor``."""
    record = executor.record(
        contract,
        start_ns=START_NS,
        hops=[
            {"layer": "L1", "node": NODE, "latency_us": 1_200},
            {"layer": "L3", "node": f"{executor.agent_id}.l3", "latency_us": 90_000},
            {"layer": "L1", "node": NODE, "latency_us": 300},
        ],
        **fields,
    )
    claims = {
        "record_id": record["record_id"],
        "router": router.agent_id,
        "node": NODE,
        "rules_sha256": "00112233445566ff" * 4,
        "domain": "contract_review",
        "confidence_ppm": 930_000,
        "l2_confirmation": False,
        "path": ["L1", "L3", "L1"],
        "subtree": "legal",
        "executor": executor.agent_id,
        "preheat": [],
        "l1_in_us": 1_000,
        "decided_ns": START_NS + 1_000_000,
        **({"supersedes": supersedes} if supersedes else {}),
    }
    return sign_record(record, protocol.sign_decision(router.key, claims), executor.key)


def _ingest(agent: SigningAgent, records: list[dict[str, Any]]) -> None:
    response = Client().post(
        "/v1/ingest/batches", data=agent.batch(records).body(), content_type="application/x-ndjson"
    )
    assert response.status_code == 200, response.content
    assert response.json()["accepted"] == len(records), response.content


@pytest.fixture
def tree() -> dict[str, Any]:
    contract, other = _contract("retried"), _contract("bystander")
    return {
        "contract": contract,
        "other": other,
        "a": signing_agent(contract, other, agent_id="exec-a"),
        "b": signing_agent(contract, other, agent_id="exec-b"),
        "router": signing_agent(contract, other, agent_id="l1-a", kind="router"),
    }


def test_a_retry_bills_the_request_once_and_the_invoice_says_why(tree: dict[str, Any]) -> None:
    contract, a, b, router = tree["contract"], tree["a"], tree["b"], tree["router"]
    # Executor A ran the request and committed ok, but its answer never reached the router; the
    # router retried on B, whose decision supersedes A's attempt. B's record may arrive first.
    first = _attempt(a, router, contract, [], tokens_in=100)
    retry = _attempt(b, router, contract, [first["record_id"]], tokens_in=100)
    _ingest(b, [retry])
    _ingest(a, [first])
    ordinary = [a.record(contract, start_ns=START_NS + k) for k in range(3)]
    _ingest(a, ordinary)

    usage = period_usage(contract.tenant.code, contract.code, *NOV)
    assert usage.record_count == 5
    assert (usage.quantities["requests"], usage.quantities["tokens_in"]) == (Decimal(4), Decimal(400))
    assert usage.excluded["by_retry"] == 1

    invoice = generate_invoice(contract.pk, *NOV, now=NOV[1] + timedelta(hours=1))
    lines = {line.dimension: (line.quantity, line.amount) for line in invoice.lines.filter(kind="usage")}
    assert lines == {
        "requests": (Decimal(4), Decimal("0.20")),
        "tokens_in": (Decimal(400), Decimal("0.08")),
    }
    assert invoice.terms["exclusions"]["by_retry"] == 1
    assert invoice.terms["exclusions"]["records"] == 1


def test_the_reconciliation_explains_a_superseded_attempt(tree: dict[str, Any]) -> None:
    contract, a, b, router = tree["contract"], tree["a"], tree["b"], tree["router"]
    first = _attempt(a, router, contract, [])
    _ingest(a, [first])
    _ingest(b, [_attempt(b, router, contract, [first["record_id"]])])
    invoice = generate_invoice(contract.pk, *NOV)  # on the real clock: finalised after both arrived
    assert invoice.finalized_at is not None

    [row] = [
        r
        for r in reconciliation_rows(ReconciliationFilter(period=NOV, contract=contract.code))
        if r["dimension"] == "requests"
    ]
    # 2 ok records were measured, 1 rated out as superseded, 1 invoiced: nothing unexplained
    assert (row["usage_total"], row["excluded"], row["invoiced"], row["unexplained"]) == (
        Decimal(2),
        Decimal(1),
        Decimal(1),
        Decimal(0),
    )


def test_a_decision_cannot_supersede_another_contracts_record(tree: dict[str, Any]) -> None:
    contract, other, a, b, router = tree["contract"], tree["other"], tree["a"], tree["b"], tree["router"]
    bystander = a.record(other, start_ns=START_NS)
    _ingest(a, [bystander])
    _ingest(b, [_attempt(b, router, contract, [bystander["record_id"], new_record_id()])])

    assert period_usage(other.tenant.code, other.code, *NOV).quantities["requests"] == Decimal(1)
    retried = period_usage(contract.tenant.code, contract.code, *NOV)
    assert retried.quantities["requests"] == Decimal(1)
    assert retried.excluded.get("by_retry", 0) == 0
