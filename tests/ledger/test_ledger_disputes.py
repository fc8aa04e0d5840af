"""Disputes of invoice lines: opened by the customer with evidence, resolved by finance into credit notes."""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from billing.models import Note
from ledger.models import Checkpoint, LogLeaf
from ledger.services import publish_checkpoint
from tests.factories import signing_agent
from tests.ledger.support import member_client, november_invoice, priced_contract, staff_client

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


@pytest.fixture
def invoiced(client: Client) -> dict[str, Any]:
    contract = priced_contract()
    agent = signing_agent(contract)
    body = agent.batch([agent.record(contract) for _ in range(4)]).body()
    assert client.post("/v1/ingest/batches", body, content_type="application/x-ndjson").status_code == 200
    invoice = november_invoice(contract)
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    line = invoice.lines.get(dimension="requests")
    return {"contract": contract, "invoice": invoice, "line": line, "body": body}


def test_a_customer_opens_a_dispute_and_gets_the_evidence(invoiced: dict[str, Any]) -> None:
    customer = member_client(invoiced["contract"], "alice")
    response = customer.post(
        "/v1/ledger/disputes",
        {"line": invoiced["line"].pk, "reason": "We sent 3 requests"},
        "application/json",
    )
    assert response.status_code == 201, response.content
    dispute = response.json()
    evidence = dispute["evidence"]
    assert (dispute["status"], dispute["reason"], evidence["records"]) == ("open", "We sent 3 requests", 4)
    assert evidence["line"] == {"dimension": "requests", "quantity": "4.000000", "amount": "0.20"}
    assert evidence["checkpoint"]["size"] == 4 and evidence["log_indices"] == [0, 3]
    leaves = b"".join(bytes(h) for h in LogLeaf.objects.order_by("index").values_list("leaf_hash", flat=True))
    assert evidence["leaf_hashes_sha256"] == hashlib.sha256(leaves).hexdigest()
    [batch] = evidence["batches"]
    assert batch["body_sha256"] == hashlib.sha256(invoiced["body"]).hexdigest()
    assert evidence["open_gaps"] == {"agent-1": []}
    assert [(h["action"], h["actor"]) for h in dispute["history"]] == [
        ("opened", "alice"),
        ("evidence_attached", None),
    ]
    again = customer.post(
        "/v1/ledger/disputes", {"line": invoiced["line"].pk, "reason": "again"}, "application/json"
    )
    assert (again.status_code, again.json()["code"]) == (409, "dispute_open")
    assert customer.get(f"/v1/ledger/disputes/{dispute['id']}").json()["id"] == dispute["id"]


def test_other_tenants_cannot_see_or_dispute_the_line(invoiced: dict[str, Any]) -> None:
    stranger = member_client(priced_contract(), "mallory")
    response = stranger.post(
        "/v1/ledger/disputes", {"line": invoiced["line"].pk, "reason": "mine?"}, "application/json"
    )
    assert (response.status_code, response.json()["code"]) == (404, "unknown_line")
    opened = member_client(invoiced["contract"], "alice").post(
        "/v1/ledger/disputes", {"line": invoiced["line"].pk, "reason": "too many"}, "application/json"
    )
    assert stranger.get(f"/v1/ledger/disputes/{opened.json()['id']}").status_code == 404
    assert stranger.get("/v1/ledger/disputes").json()["results"] == []
    bad = stranger.post("/v1/ledger/disputes", {"line": "x"}, "application/json")
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_request")


def test_finance_rejects_with_the_evidence_and_cannot_resolve_twice(invoiced: dict[str, Any]) -> None:
    customer = member_client(invoiced["contract"], "alice")
    opened = customer.post(
        "/v1/ledger/disputes", {"line": invoiced["line"].pk, "reason": "too many"}, "application/json"
    ).json()
    url = f"/v1/ledger/disputes/{opened['id']}/resolve"
    assert customer.post(url, {"decision": "reject"}, "application/json").status_code == 403
    finance = staff_client()
    rejected = finance.post(url, {"decision": "reject", "comment": "all 4 logged"}, "application/json").json()
    assert rejected["status"] == "rejected" and not Note.objects.exists()
    assert rejected["history"][-1]["action"] == "rejected"
    assert rejected["history"][-1]["actor"] == "finance"
    assert rejected["history"][-1]["detail"] == {"comment": "all 4 logged", "evidence": "attached"}
    again = finance.post(url, {"decision": "accept"}, "application/json")
    assert (again.status_code, again.json()["code"]) == (409, "already_resolved")


def test_finance_accepts_in_part_and_the_line_is_settled(invoiced: dict[str, Any]) -> None:
    customer, finance = member_client(invoiced["contract"], "alice"), staff_client()
    line = invoiced["line"]
    first = customer.post(
        "/v1/ledger/disputes", {"line": line.pk, "reason": "one failed"}, "application/json"
    )
    partial = finance.post(
        f"/v1/ledger/disputes/{first.json()['id']}/resolve",
        {"decision": "accept", "comment": "one request was a 503", "amount": "0.05"},
        "application/json",
    ).json()
    assert (partial["status"], partial["credited"]) == ("accepted", "0.05")
    assert partial["history"][-1]["detail"]["partial"] is True
    notes = list(Note.objects.order_by("id").values_list("kind", "amount", "line_id"))
    assert notes == [("credit", Decimal("0.05"), line.pk)]
    again = customer.post("/v1/ledger/disputes", {"line": line.pk, "reason": "all"}, "application/json")
    assert (again.status_code, again.json()["code"]) == (409, "line_settled")


def test_an_acceptance_credits_at_most_what_the_line_has_left(invoiced: dict[str, Any]) -> None:
    customer, finance = member_client(invoiced["contract"], "alice"), staff_client()
    opened = customer.post(
        "/v1/ledger/disputes", {"line": invoiced["line"].pk, "reason": "all of it"}, "application/json"
    )
    over = finance.post(
        f"/v1/ledger/disputes/{opened.json()['id']}/resolve",
        {"decision": "accept", "amount": "0.25"},
        "application/json",
    )
    assert (over.status_code, over.json()["code"]) == (409, "note_exceeds_line")
    full = finance.post(
        f"/v1/ledger/disputes/{opened.json()['id']}/resolve", {"decision": "accept"}, "application/json"
    ).json()
    assert full["credited"] == "0.20"  # the whole line, without an amount
