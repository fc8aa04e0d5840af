"""An invoice's completeness: the records it covers and the gaps of the agents that served it."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import signing_agent
from tests.ledger.support import member_client, november_invoice, priced_contract, send, staff_client

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


def test_the_invoice_states_its_records_and_the_serving_agents_gaps(client: Client) -> None:
    contract, other = priced_contract(), priced_contract()
    first = signing_agent(contract, other, agent_id="agent-1")
    second = signing_agent(contract, agent_id="agent-2")
    send(client, first, [first.record(contract, seq=s) for s in (0, 1, 2)])
    send(client, first, [first.record(other, seq=3)])  # another tenant's record: not this invoice's
    send(client, first, [first.record(contract, seq=s) for s in (7, 8)])  # seq 4-6 never arrived
    send(client, second, [second.record(contract, seq=s) for s in (0, 1)])
    invoice = november_invoice(contract)
    url = f"/v1/ledger/invoices/{invoice.pk}/completeness"
    report = member_client(contract, "alice").get(url).json()
    assert report == {
        "invoice": invoice.pk,
        "contract": contract.code,
        "period_start": "2026-11-01T00:00:00+00:00",
        "period_end": "2026-12-01T00:00:00+00:00",
        "invoice_record_count": 7,
        "logged_records": 7,
        "excluded_records": 0,
        "agents": [
            {
                "agent_id": "agent-1",
                "records": 5,
                "first_seq": 0,
                "last_seq": 8,
                "gaps": [[4, 6]],
                "missing": 3,
            },
            {"agent_id": "agent-2", "records": 2, "first_seq": 0, "last_seq": 1, "gaps": [], "missing": 0},
        ],
        "complete": False,
    }
    assert staff_client().get(url).json() == report
    stranger = member_client(other, "mallory")
    denied = stranger.get(url)
    assert (denied.status_code, denied.json()["code"]) == (404, "unknown_invoice")
    assert stranger.get("/v1/ledger/invoices/999999/completeness").status_code == 404
