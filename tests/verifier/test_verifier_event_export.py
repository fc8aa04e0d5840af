"""A real export of an invoice billed per business event (issue 19.2): real ingest, ClickHouse, billing
and ledger, then `treemeter-verify` groups the records into events again, re-evaluates the acceptance
rules and re-rates each event line; a tampered quantity, event list or amount is named."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from billing.services import finalize_invoice
from contracts.models import ContractPrice
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from tests.billing.composed import call, composed_contract
from tests.factories import SigningAgent, signing_agent
from tests.ledger.support import member_client, november_invoice, pinned_keys, send
from treemeter_verify import verify_export
from treemeter_verify.check import read_export

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


def _export(client: Client) -> tuple[dict[str, Any], Sequence[bytes], SigningAgent]:
    contract = composed_contract()
    ContractPrice.objects.create(contract=contract, dimension="supplier_event", unit_price=Decimal("12.50"))
    agent = signing_agent(contract)
    send(
        client,
        agent,
        [
            call(agent, contract, "po-1", "ocr"),
            call(agent, contract, "po-1", "clauses", outcome={"f1": "0.95"}),
            call(agent, contract, "po-2", "ocr"),
            call(agent, contract, "po-2", "clauses", outcome={"f1": "0.71"}),  # fails acceptance
            call(agent, contract, "po-3", "ocr"),  # partial
            call(agent, contract, "po-4", "ocr"),
            call(agent, contract, "po-4", "clauses", outcome={"f1": "0.93"}),
            call(agent, contract, "ship-1", "ocr", package="logistics"),  # not priced by events
        ],
    )
    invoice = finalize_invoice(november_invoice(contract))
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    body = member_client(contract, "alice").get(f"/v1/ledger/invoices/{invoice.pk}/export").content
    manifest, lines = read_export(body)
    return manifest, lines, agent


def _verdict(manifest: dict[str, Any], lines: Sequence[bytes], agent: SigningAgent) -> tuple[bool, str]:
    report = verify_export(manifest, lines, pinned_keys(agent))
    return next((v.ok, v.detail) for v in report.verdicts if v.check == "event line supplier_event")


def _line(manifest: dict[str, Any]) -> dict[str, Any]:
    return next(x for x in manifest["invoice"]["lines"] if x["dimension"] == "supplier_event")


def test_an_event_line_is_verified_offline_and_tampering_is_named(client: Client) -> None:
    manifest, lines, agent = _export(client)
    assert manifest["invoice"]["events"] == {
        "supplier_event": {
            "package": "supplier",
            "required": ["model-clauses", "model-ocr"],
            "rules": {"model-clauses": "outcome_f1 >= 0.92"},
        }
    }
    assert [e["event_id"] for e in _line(manifest)["events"]] == ["po-1", "po-4"]
    report = verify_export(manifest, lines, pinned_keys(agent))
    assert report.ok, [v for v in report.verdicts if not v.ok]
    ok, detail = _verdict(manifest, lines, agent)
    assert (ok, detail) == (True, "2 events × 12.5 = 25.00 CNY")

    _line(manifest)["quantity"] = "3.000000"
    ok, detail = _verdict(manifest, lines, agent)
    assert not ok and "quantity 3" in detail and "2 events" in detail, detail

    _line(manifest)["quantity"] = "2.000000"
    _line(manifest)["events"][1]["event_id"] = "po-2"  # an event that failed acceptance, billed instead
    ok, detail = _verdict(manifest, lines, agent)
    assert not ok and "po-2" in detail and "po-4" in detail, detail

    _line(manifest)["events"][1]["event_id"] = "po-4"
    _line(manifest)["amount"] = "30.00"
    ok, detail = _verdict(manifest, lines, agent)
    assert not ok and "30.00" in detail and "25.00" in detail, detail


def test_a_shared_capabilitys_call_counts_in_both_packages_events_offline(client: Client) -> None:
    contract = composed_contract()
    for unit, price in (("supplier_event", "12.50"), ("shipment_event", "3.00")):
        ContractPrice.objects.create(contract=contract, dimension=unit, unit_price=Decimal(price))
    agent = signing_agent(contract)
    send(
        client,
        agent,
        [
            call(agent, contract, "deal-1", "ocr"),
            call(agent, contract, "deal-1", "clauses", outcome={"f1": "0.95"}),
            call(agent, contract, "deal-1", "routes", package="logistics", outcome={"on_time": 1}),
        ],
    )
    invoice = finalize_invoice(november_invoice(contract))
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    body = member_client(contract, "bob").get(f"/v1/ledger/invoices/{invoice.pk}/export").content
    manifest, lines = read_export(body)
    report = verify_export(manifest, lines, pinned_keys(agent))
    assert report.ok, [v for v in report.verdicts if not v.ok]
    verdicts = {v.check: v.detail for v in report.verdicts}
    assert verdicts["event line shipment_event"] == "1 event × 3 = 3.00 CNY"
    assert verdicts["event line supplier_event"] == "1 event × 12.5 = 12.50 CNY"
