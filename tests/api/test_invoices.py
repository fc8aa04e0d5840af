"""GET /v1/invoices (status, period, contract filters), /v1/credit-notes, /v1/outcomes: figures from real
invoices rated over records sent through the ingest API; each tenant sees only its own."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from billing.models import Invoice
from billing.services import generate_invoice
from billing.settlement import issue_note
from common.periods import month_bounds
from contracts.models import Contract, ContractPrice
from tests.api.conftest import member_client, post_json, staff_client, token_client
from tests.billing.usage import at, send
from tests.factories import ContractFactory, TenantFactory

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]
DECEMBER = datetime(2026, 12, 2, tzinfo=UTC)


def invoiced(contract: Contract, month: str, requests: int, grace_days: int = 0) -> Invoice:
    day = month_bounds(month)[0]
    send(contract, requests, at(day.year, day.month, 4))
    return generate_invoice(contract.pk, *month_bounds(month), now=DECEMBER)


@pytest.fixture
def acme() -> Contract:
    contract = ContractFactory.create(code="acme-main", tenant=TenantFactory.create(code="acme"))
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=Decimal("0.50"))
    return contract


def test_invoices_list_with_filters(acme: Contract) -> None:
    october = invoiced(acme, "2026-10", 2)
    november = invoiced(acme, "2026-11", 3)
    other = ContractFactory.create(code="acme-side", tenant=acme.tenant, grace_days=30)
    ContractPrice.objects.create(contract=other, dimension="requests", unit_price=Decimal("1.00"))
    invoiced(other, "2026-11", 1)  # still in its grace period: not finalised
    client = token_client(acme.tenant, "read_only")

    body = client.get("/v1/invoices").json()["results"]
    assert [(i["contract"], i["period_start"][:7], i["status"], i["total"]) for i in body] == [
        ("acme-side", "2026-11", "grace", "1.00"),
        ("acme-main", "2026-11", "finalized", "1.50"),
        ("acme-main", "2026-10", "finalized", "1.00"),
    ]
    assert "lines" not in body[0]

    def ids(query: str) -> list[int]:
        return [i["id"] for i in client.get(f"/v1/invoices?{query}").json()["results"]]

    assert ids("period=2026-11&contract=acme-main") == [november.pk]
    assert ids("status=finalized&period=2026-10") == [october.pk]
    assert ids("contract=acme-side&status=finalized") == []
    for query, field in (("period=2026-13", "period"), ("period=nov", "period"), ("status=late", "status")):
        bad = client.get(f"/v1/invoices?{query}")
        assert (bad.status_code, bad.json()["code"], list(bad.json()["details"])) == (
            400,
            "invalid_request",
            [field],
        )


def test_invoices_and_credit_notes_of_another_tenant_are_invisible(acme: Contract) -> None:
    invoice = invoiced(acme, "2026-11", 3)
    note = issue_note(invoice, "credit", Decimal("0.40"), "Goodwill")
    stranger = member_client(TenantFactory.create(code="other"))
    assert stranger.get("/v1/invoices").json()["results"] == []
    assert stranger.get("/v1/credit-notes").json()["results"] == []
    assert stranger.get(f"/v1/credit-notes/{note.pk}").status_code == 404
    assert [i["id"] for i in staff_client().get("/v1/invoices").json()["results"]] == [invoice.pk]


def test_credit_notes_list_and_detail(acme: Contract) -> None:
    invoice = invoiced(acme, "2026-11", 3)
    issue_note(invoice, "debit", Decimal("0.10"), "Late fee")  # a debit note is not a credit note
    note = issue_note(invoice, "credit", Decimal("0.40"), "Goodwill", line=invoice.lines.get())
    client = member_client(acme.tenant, "billing")

    listed = client.get("/v1/credit-notes").json()["results"]
    detail = client.get(f"/v1/credit-notes/{note.pk}").json()

    assert listed == [detail]
    assert {k: v for k, v in detail.items() if k != "created_at"} == {
        "id": note.pk,
        "number": note.number,
        "invoice": invoice.pk,
        "invoice_number": invoice.number,
        "contract": "acme-main",
        "line": invoice.lines.get().pk,
        "reason": "Goodwill",
        "amount": "0.40",
        "currency": "CNY",
    }
    assert client.get(f"/v1/credit-notes?invoice={invoice.pk + 1}").json()["results"] == []
    assert len(client.get("/v1/credit-notes?contract=acme-main").json()["results"]) == 1


def test_outcomes_list_with_filters(acme: Contract) -> None:
    client = token_client(acme.tenant, "developer")
    first = post_json(
        client, "/v1/outcomes", {"contract": "acme-main", "ref": "m-1", "type": "match", "value": "2000"}
    )
    post_json(
        client, "/v1/outcomes", {"contract": "acme-main", "ref": "m-2", "type": "match", "value": "15.5"}
    )
    post_json(client, f"/v1/outcomes/{first.json()['id']}/confirm")

    listed = client.get("/v1/outcomes").json()["results"]
    assert [(o["ref"], o["status"], o["value"]) for o in listed] == [
        ("m-2", "pending", "15.500000"),
        ("m-1", "confirmed", "2000.000000"),
    ]
    assert [o["ref"] for o in client.get("/v1/outcomes?status=confirmed").json()["results"]] == ["m-1"]
    assert member_client(TenantFactory.create()).get("/v1/outcomes").json()["results"] == []
    refused = post_json(
        token_client(acme.tenant, "read_only"),
        "/v1/outcomes",
        {"contract": "acme-main", "ref": "m-3", "type": "match", "value": "1"},
    )
    assert (refused.status_code, refused.json()["code"]) == (403, "forbidden_role")
