"""Business events billed (issue 19.2): a contract composed of two packages sharing OCR, priced per
event of each package's unit; real records through ingest, real ClickHouse and PostgreSQL. The invoice
line reads "Supplier events: 2 × 12.50", lists its events with their records, and agrees with the events
report; an event that late records complete is billed on the next invoice, as the late-usage policy
says."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from billing.exports import invoice_export
from billing.models import Invoice, LateUsage
from billing.services import generate_invoice
from billing.terms import terms_of
from catalog.models import ComputePackage, PackageCapability
from common.periods import month_bounds
from contracts.models import Contract, ContractPackage, ContractPrice
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from pricing.errors import TermsError
from releases.services import CapabilitySpec, PlanSpec, StageSpec, create_plan
from tests.api.conftest import staff_client, token_client
from tests.billing.composed import DAY, call, capability, composed_contract
from tests.billing.usage import ingest
from tests.factories import SigningAgent, signing_agent

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]
D = Decimal
NOV, DEC = month_bounds("2026-11"), month_bounds("2026-12")
DEC_2, JAN_2 = datetime(2026, 12, 2, tzinfo=UTC), datetime(2027, 1, 2, tzinfo=UTC)


def priced(contract: Contract) -> Contract:
    for unit, price in (("supplier_event", "12.50"), ("shipment_event", "3.00")):
        ContractPrice.objects.create(contract=contract, dimension=unit, unit_price=D(price))
    return contract


def november(agent: SigningAgent, contract: Contract) -> list[dict[str, Any]]:
    records = [
        call(agent, contract, "po-1", "ocr"),
        call(agent, contract, "po-1", "clauses", outcome={"f1": "0.95"}),
        call(agent, contract, "po-2", "ocr"),
        call(agent, contract, "po-2", "clauses", outcome={"f1": "0.71"}),  # fails acceptance
        call(agent, contract, "po-3", "ocr"),  # partial: its clauses come late
        call(agent, contract, "po-4", "ocr"),
        call(agent, contract, "po-4", "clauses", outcome={"f1": "0.60"}),
        call(agent, contract, "po-4", "clauses", outcome={"f1": "0.93"}),  # a second try that passed
        call(agent, contract, "ship-1", "ocr", package="logistics"),
        call(agent, contract, "ship-1", "routes", package="logistics", outcome={"on_time": 1}),
        call(agent, contract, "ship-2", "routes", package="logistics", outcome={"on_time": 1}),
    ]
    ingest(agent, records)
    return records


def usage_lines(invoice: Invoice) -> list[tuple[str, str, Decimal, Decimal, Decimal]]:
    return [
        (line.dimension, line.description, line.quantity, line.unit_price, line.amount)
        for line in invoice.lines.order_by("pk")
    ]


def test_billable_events_are_invoice_lines_that_list_their_events_and_records() -> None:
    contract = priced(composed_contract())
    agent = signing_agent(contract)
    records = november(agent, contract)

    invoice = generate_invoice(contract.pk, *NOV, now=DEC_2)

    assert usage_lines(invoice) == [  # units in name order, as metrics are
        ("shipment_event", "Shipment events", D(1), D("3.00"), D("3.00")),
        ("supplier_event", "Supplier events", D(2), D("12.50"), D("25.00")),
    ]
    assert invoice.subtotal == D("28.00")
    ids = [str(r["record_id"]) for r in records]
    supplier = invoice.lines.get(dimension="supplier_event").details["events"]
    assert supplier == [
        {"event_id": "po-1", "records": sorted(ids[0:2])},
        {"event_id": "po-4", "records": sorted(ids[5:8])},
    ]
    assert invoice.lines.get(dimension="shipment_event").details["events"] == [
        {"event_id": "ship-1", "records": sorted(ids[8:10])}
    ]
    assert invoice.terms["events"]["supplier_event"] == {
        "package": "supplier",
        "required": ["model-clauses", "model-ocr"],
        "rules": {"model-clauses": "outcome_f1 >= 0.92"},
    }

    # One figure, one value: the events report counts what the invoice bills.
    report = token_client(contract.tenant).get(f"/v1/contracts/{contract.code}/events?month=2026-11").json()
    billable = {p["unit"]: p["counts"]["billable"] for p in report["packages"]}
    assert billable == {"supplier_event": 2, "shipment_event": 1}

    # The export states the pinned event terms and each line's events.
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    manifest, _ = invoice_export(invoice, [])
    assert manifest["invoice"]["events"]["shipment_event"]["required"] == ["model-ocr", "model-routes"]
    exported = {x["dimension"]: x for x in manifest["invoice"]["lines"]}
    assert exported["supplier_event"]["events"] == supplier
    assert manifest["prices"]["supplier_event"]["properties"] == {"unit_price": "12.5"}


def test_an_event_completed_by_late_records_is_billed_next_month_once() -> None:
    contract = priced(composed_contract())
    agent = signing_agent(contract)
    november(agent, contract)
    first = generate_invoice(contract.pk, *NOV, now=DEC_2)
    assert first.status == Invoice.Status.FINALIZED

    late = call(agent, contract, "po-3", "clauses", outcome={"f1": "0.97"})  # November, arrives in December
    ingest(agent, [late])
    december = generate_invoice(contract.pk, *DEC, now=JAN_2)

    adjustment = december.lines.get(kind="adjustment")
    billed = (adjustment.dimension, adjustment.quantity, adjustment.amount)
    assert billed == ("supplier_event", D(1), D("12.50"))
    assert [e["event_id"] for e in adjustment.details["events"]] == ["po-3"]
    assert str(late["record_id"]) in adjustment.details["events"][0]["records"]
    assert list(LateUsage.objects.values_list("dimension", "quantity", "decision")) == [
        ("supplier_event", D(1), "adjusted")
    ]
    first.refresh_from_db()
    assert first.subtotal == D("28.00")  # the finalised invoice is never re-rated


def test_a_price_may_name_only_a_unit_of_a_package_the_contract_holds() -> None:
    contract = composed_contract()
    client = staff_client()
    ok = client.put(
        f"/v1/contracts/{contract.code}/charges/shipment_event",
        {"charge_model": "per_unit", "unit_price": "3.00"},
        content_type="application/json",
    )
    assert ok.status_code == 200, ok.content
    other = ComputePackage.objects.create(code="insurance", name="Insurance", unit="claim_event")
    PackageCapability.objects.create(package=other, capability=capability("claims"))
    refused = client.put(
        f"/v1/contracts/{contract.code}/charges/claim_event",
        {"charge_model": "per_unit", "unit_price": "3.00"},
        content_type="application/json",
    )
    assert refused.status_code == 400
    assert refused.json()["code"] == "unknown_dimension"


def test_two_held_packages_measured_in_one_unit_cannot_be_priced_by_it() -> None:
    contract = priced(composed_contract())
    twin = ComputePackage.objects.create(code="supplier-2", name="Supplier 2", unit="supplier_event")
    PackageCapability.objects.create(package=twin, capability=capability("audit"))
    ContractPackage.objects.create(contract=contract, package=twin)
    with pytest.raises(TermsError) as refused:
        terms_of(contract, *NOV)
    assert refused.value.code == "ambiguous_event_unit"
    assert refused.value.details == {"unit": "supplier_event", "packages": ["supplier", "supplier-2"]}


def early_and_late_events(contract: Contract) -> None:
    """Two billable supplier events: po-1 on November 10, po-9 on November 25."""
    agent = signing_agent(contract)
    later = DAY + 15 * 86400 * 10**9
    ingest(
        agent,
        [
            call(agent, contract, "po-1", "ocr"),
            call(agent, contract, "po-1", "clauses", outcome={"f1": "0.95"}),
            call(agent, contract, "po-9", "ocr", start_ns=later),
            call(agent, contract, "po-9", "clauses", outcome={"f1": "0.99"}, start_ns=later + 10**9),
        ],
    )


def test_events_start_where_their_first_record_does_and_a_price_version_bills_its_own() -> None:
    contract = priced(composed_contract())
    ContractPrice.objects.create(
        contract=contract,
        dimension="supplier_event",
        unit_price=D("10.00"),
        effective_from=datetime(2026, 11, 20, tzinfo=UTC),
    )
    early_and_late_events(contract)
    invoice = generate_invoice(contract.pk, *NOV, now=DEC_2)
    versions = invoice.lines.filter(dimension="supplier_event").order_by("pk")
    assert [(x.quantity, x.unit_price, x.amount) for x in versions] == [
        (D(1), D("12.50"), D("12.50")),
        (D(1), D("10.00"), D("10.00")),
    ]
    assert [[e["event_id"] for e in x.details["events"]] for x in versions] == [["po-1"], ["po-9"]]


def test_the_events_of_a_gray_release_stage_with_billing_off_are_not_billed() -> None:
    contract = priced(composed_contract())
    # From November 20 the supplier package is in a gray stage: its usage is metered, not billed.
    create_plan(
        spec=PlanSpec(
            "supplier-launch",
            "Launch",
            contract.code,
            stages=[StageSpec("Day 1", [CapabilitySpec("ocr"), CapabilitySpec("clauses")])],
        ),
        now=datetime(2026, 11, 20, tzinfo=UTC),
    )
    early_and_late_events(contract)
    invoice = generate_invoice(contract.pk, *NOV, now=DEC_2)
    line = invoice.lines.get(dimension="supplier_event")
    assert (line.quantity, line.amount) == (D(1), D("12.50"))
    assert [e["event_id"] for e in line.details["events"]] == ["po-1"]
    assert invoice.terms["exclusions"]["by_gray_release"] == 2


def test_a_capability_two_packages_share_runs_once_per_event_and_counts_for_both() -> None:
    contract = priced(composed_contract())
    agent = signing_agent(contract)
    records = [
        call(agent, contract, "deal-1", "ocr"),  # once, under supplier: logistics' event uses it too
        call(agent, contract, "deal-1", "clauses", outcome={"f1": "0.95"}),
        call(agent, contract, "deal-1", "routes", package="logistics", outcome={"on_time": 1}),
        call(agent, contract, "deal-2", "ocr"),  # no logistics call: no logistics event
        call(agent, contract, "deal-2", "clauses", outcome={"f1": "0.96"}),
    ]
    ingest(agent, records)
    invoice = generate_invoice(contract.pk, *NOV, now=DEC_2)
    assert [(x.dimension, x.quantity) for x in invoice.lines.order_by("pk")] == [
        ("shipment_event", D(1)),
        ("supplier_event", D(2)),
    ]
    shipment = invoice.lines.get(dimension="shipment_event").details["events"]
    ocr, routes = str(records[0]["record_id"]), str(records[2]["record_id"])
    assert shipment == [{"event_id": "deal-1", "records": sorted([ocr, routes])}]
