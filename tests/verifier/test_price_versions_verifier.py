"""The invoice export and the standalone verifier when a price changed within the period: the export
lists each dimension once with its versions, and the verifier checks the version lines' quantities
together against the records and re-rates each version's line from its terms (real ingest, billing, ledger
and export)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import Client

from contracts.models import ContractPrice
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from tests.factories import ContractFactory, signing_agent
from tests.ledger.support import member_client, november_invoice, pinned_keys, send
from treemeter_verify import verify_export
from treemeter_verify.check import read_export

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
D = Decimal
CHANGE = datetime(2026, 11, 15, tzinfo=UTC)


def test_a_price_change_is_exported_with_its_versions_and_verifies(client: Client) -> None:
    contract = ContractFactory.create()
    prices = ContractPrice.objects
    prices.create(contract=contract, dimension="requests", unit_price=D("0.05"))
    prices.create(contract=contract, dimension="tokens_in", unit_price=D("0.0002"))
    prices.create(contract=contract, dimension="tokens_in", unit_price=D("0.0001"), effective_from=CHANGE)
    agent = signing_agent(contract)
    records = [
        agent.record(contract, start_ns=int(day.timestamp()) * 10**9, tokens_in=1000)
        for day in (datetime(2026, 11, 10, tzinfo=UTC), datetime(2026, 11, 20, tzinfo=UTC))
    ]
    send(client, agent, records)
    invoice = november_invoice(contract)
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    response = member_client(contract, "alice").get(f"/v1/ledger/invoices/{invoice.pk}/export")
    assert response.status_code == 200, response.content
    manifest, lines = read_export(response.content)

    assert list(manifest["prices"]) == ["requests", "tokens_in"]
    tokens = manifest["prices"]["tokens_in"]
    assert (tokens["properties"], tokens["effective_from"]) == ({"unit_price": "0.0001"}, CHANGE.isoformat())
    assert [(v["properties"], v["effective_from"]) for v in tokens["versions"]] == [
        ({"unit_price": "0.0002"}, ""),
        ({"unit_price": "0.0001"}, CHANGE.isoformat()),
    ]
    assert [
        (x["dimension"], x["quantity"], x["amount"], x.get("effective_from"))
        for x in manifest["invoice"]["lines"]
    ] == [
        ("requests", "2.000000", "0.10", None),  # 2 × 0.05
        ("tokens_in", "1000.000000", "0.20", ""),  # 1,000 × 0.0002
        ("tokens_in", "1000.000000", "0.10", CHANGE.isoformat()),  # 1,000 × 0.0001
    ]

    report = verify_export(manifest, lines, pinned_keys(agent), None)

    assert [v.check for v in report.verdicts if not v.ok] == []
    assert [(v.check, v.detail, v.skipped) for v in report.verdicts if v.check.startswith("line")] == [
        ("line usage requests", "2 × 0.05 = 0.10 CNY", False),
        ("line usage tokens_in", "quantity 2000 over 2 price versions = 0.30 CNY", False),
    ]

    manifest["invoice"]["lines"][1]["quantity"] = "1001"
    tampered = verify_export(manifest, lines, pinned_keys(agent), None)
    assert {(v.check, v.detail) for v in tampered.verdicts if not v.ok} == {
        ("line usage tokens_in", "quantities add up to 2001 but the records give 2000")
    }
    manifest["invoice"]["lines"][1]["quantity"] = "1000"
    manifest["invoice"]["lines"][2]["amount"] = "0.11"
    tampered = verify_export(manifest, lines, pinned_keys(agent), None)
    assert {(v.check, v.detail) for v in tampered.verdicts if not v.ok} == {
        (
            "line usage tokens_in",
            f"version from {CHANGE.isoformat()}: amount 0.11 CNY but its terms give 0.10 (off by 0.01 CNY)",
        ),
        ("invoice totals", "subtotal 0.40 CNY but the lines add up to 0.41"),
    }


TIERS_A = [{"up_to": 1500, "unit_price": "0.0002"}, {"unit_price": "0.0001"}]
TIERS_B = [{"up_to": 1500, "unit_price": "0.0003"}, {"unit_price": "0.00005"}]


def test_tiers_continue_across_versions_and_the_newest_minimum_is_a_line_of_its_own(client: Client) -> None:
    contract = ContractFactory.create()
    prices = ContractPrice.objects
    prices.create(
        contract=contract,
        dimension="tokens_in",
        charge_model="graduated",
        properties={"tiers": TIERS_A},
        included_quantity=D(200),
    )
    prices.create(
        contract=contract,
        dimension="tokens_in",
        charge_model="graduated",
        properties={"tiers": TIERS_B, "minimum": "5.00"},
        included_quantity=D(300),
        effective_from=CHANGE,
    )
    agent = signing_agent(contract)
    records = [
        agent.record(contract, start_ns=int(day.timestamp()) * 10**9, tokens_in=1000)
        for day in (datetime(2026, 11, 10, tzinfo=UTC), datetime(2026, 11, 20, tzinfo=UTC))
    ]
    send(client, agent, records)
    invoice = november_invoice(contract)
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    manifest, lines = read_export(
        member_client(contract, "alice").get(f"/v1/ledger/invoices/{invoice.pk}/export").content
    )
    # The newest version's 300 included units come off the earliest usage: 700 billable before the
    # change at 0.0002 = 0.14; after it positions 700 → 1,700 on version B's ladder: 800 × 0.0003 +
    # 200 × 0.00005 = 0.25; 0.39 rated is under the 5.00 minimum: a bound line of 4.61.
    assert [(x["quantity"], x["amount"], "segment_start" in x) for x in manifest["invoice"]["lines"]] == [
        ("1000.000000", "0.14", True),
        ("1000.000000", "0.25", True),
        ("0.000000", "4.61", False),
    ]
    report = verify_export(manifest, lines, pinned_keys(agent), None)
    assert [(v.check, v.ok, v.detail) for v in report.verdicts if v.check.startswith("line")] == [
        ("line usage tokens_in", True, "quantity 2000 over 2 price versions = 5.00 CNY")
    ]
    manifest["invoice"]["lines"][2]["amount"] = "4.60"
    tampered = verify_export(manifest, lines, pinned_keys(agent), None)
    assert ("line usage tokens_in", "period bound line 4.60 CNY but the newest terms give 4.61") in {
        (v.check, v.detail) for v in tampered.verdicts if not v.ok
    }
