"""Business events over a whole month, records through the real ingest: a contract holding two packages
that share OCR; events that succeed, fail acceptance, or are only partial; what the API answers."""

from __future__ import annotations

import pytest

from tests.api.conftest import token_client
from tests.billing.composed import call, composed_contract
from tests.billing.usage import ingest
from tests.factories import TenantFactory, signing_agent

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]


def test_events_are_billable_only_when_every_required_capability_succeeded_and_was_accepted() -> None:
    contract = composed_contract()
    agent = signing_agent(contract)
    records = [
        # supplier events
        call(agent, contract, "po-1", "ocr"),
        call(agent, contract, "po-1", "clauses", outcome={"f1": "0.95"}),
        call(agent, contract, "po-2", "ocr"),
        call(agent, contract, "po-2", "clauses", outcome={"f1": "0.71"}),  # the dialect problem
        call(agent, contract, "po-3", "ocr"),
        call(agent, contract, "po-3", "clauses", status="error", outcome=None),  # never served
        call(agent, contract, "po-4", "ocr"),
        call(agent, contract, "po-4", "clauses", outcome={"f1": "0.60"}),  # a retry that passed
        call(agent, contract, "po-4", "clauses", outcome={"f1": "0.93"}),
        call(agent, contract, "po-4", "summary", status="error"),  # optional: does not matter
        # logistics events, sharing OCR
        call(agent, contract, "ship-1", "ocr", package="logistics"),
        call(agent, contract, "ship-1", "routes", package="logistics", outcome={"on_time": 1}),
        call(agent, contract, "ship-2", "routes", package="logistics", outcome={"on_time": 1}),  # no OCR
        call(agent, contract, "", "ocr"),  # no event id: not an event
    ]
    ingest(agent, records)

    body = token_client(contract.tenant).get(f"/v1/contracts/{contract.code}/events?month=2026-11").json()

    assert body["packages"] == [
        {
            "package": "logistics",
            "unit": "shipment_event",
            "counts": {"billable": 1, "failed_acceptance": 0, "partial": 1},
        },
        {
            "package": "supplier",
            "unit": "supplier_event",
            "counts": {"billable": 2, "failed_acceptance": 1, "partial": 1},
        },
    ]
    events = {(e["package"], e["event_id"]): e for e in body["events"]}
    assert {key: (e["status"], e["missing"], e["not_accepted"]) for key, e in events.items()} == {
        ("logistics", "ship-1"): ("billable", [], []),
        ("logistics", "ship-2"): ("partial", ["ocr"], []),
        ("supplier", "po-1"): ("billable", [], []),
        ("supplier", "po-2"): ("failed_acceptance", [], ["clauses"]),
        ("supplier", "po-3"): ("partial", ["clauses"], []),
        ("supplier", "po-4"): ("billable", [], []),
    }
    po4 = events[("supplier", "po-4")]["records"]
    assert [(r["model_id"], r["status"], r["accepted"]) for r in po4] == [
        ("model-ocr", "ok", True),
        ("model-clauses", "ok", False),
        ("model-clauses", "ok", True),
        ("model-summary", "error", True),
    ]
    assert {r["record_id"] for r in po4} == {str(r["record_id"]) for r in records[6:10]}

    failed = token_client(contract.tenant).get(
        f"/v1/contracts/{contract.code}/events?month=2026-11&status=failed_acceptance"
    )
    assert [e["event_id"] for e in failed.json()["events"]] == ["po-2"]


def test_the_events_of_another_tenants_contract_are_404_and_bad_queries_400() -> None:
    contract = composed_contract()
    outsider = token_client(TenantFactory.create())
    assert outsider.get(f"/v1/contracts/{contract.code}/events").status_code == 404
    owner = token_client(contract.tenant)
    for query in ("month=2026-13", "status=maybe", "limit=1001", "status=", "month="):
        answer = owner.get(f"/v1/contracts/{contract.code}/events?{query}")
        assert answer.status_code == 400, query
