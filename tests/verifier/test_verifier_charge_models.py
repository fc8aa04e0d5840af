"""The standalone verifier re-rates every charge model's line to the cent from the export's pinned terms
and the records (real ingest, billing, ledger and export), and says which line differs and by how much."""

from __future__ import annotations

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
TIERS = [{"up_to": 150, "unit_price": "0.01"}, {"unit_price": "0.002", "flat_fee": "0.50"}]


def test_graduated_volume_package_and_percentage_lines_are_re_rated(client: Client) -> None:
    contract = ContractFactory.create()
    prices = ContractPrice.objects
    prices.create(
        contract=contract, dimension="tokens_in", charge_model="graduated", properties={"tiers": TIERS}
    )
    prices.create(
        contract=contract, dimension="tokens_out", charge_model="volume", properties={"tiers": TIERS}
    )
    prices.create(
        contract=contract,
        dimension="routing_hops",
        charge_model="package",
        properties={"package_size": "4", "package_price": "0.30", "free_units": "1"},
    )
    prices.create(
        contract=contract,
        dimension="requests",
        charge_model="percentage",
        properties={"rate": "0.10", "fixed_fee": "0.07", "minimum": "1.00"},
        included_quantity=D(1),
    )
    agent = signing_agent(contract)
    send(client, agent, [agent.record(contract) for _ in range(3)])  # 100 in, 20 out, 5 hops each
    invoice = november_invoice(contract)
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    response = member_client(contract, "alice").get(f"/v1/ledger/invoices/{invoice.pk}/export")
    manifest, lines = read_export(response.content)

    report = verify_export(manifest, lines, pinned_keys(agent), None)

    assert [v.check for v in report.verdicts if not v.ok] == []
    # tokens_in 300: 150 × 0.01 + 150 × 0.002 + 0.50 = 2.30; tokens_out 60 in the first tier: 0.60;
    # 15 hops, 1 free: 4 blocks × 0.30 = 1.20; 2 requests above the quota of 1 at 0.07 = 0.14 → minimum 1.00.
    assert {v.check: v.detail for v in report.verdicts if v.check.startswith("line usage")} == {
        "line usage requests": "3 at percentage = 1.00 CNY",
        "line usage tokens_in": "300 at graduated = 2.30 CNY",
        "line usage tokens_out": "60 at volume = 0.60 CNY",
        "line usage routing_hops": "15 at package = 1.20 CNY",
    }

    line = next(x for x in manifest["invoice"]["lines"] if x["dimension"] == "tokens_in")
    line["amount"] = "2.31"
    tampered = verify_export(manifest, lines, pinned_keys(agent), None)
    assert {(v.check, v.detail) for v in tampered.verdicts if not v.ok} == {
        ("line usage tokens_in", "amount 2.31 CNY but the contract terms give 2.30 (off by 0.01 CNY)"),
        ("invoice totals", "subtotal 5.10 CNY but the lines add up to 5.11"),  # the line alone was changed
    }
