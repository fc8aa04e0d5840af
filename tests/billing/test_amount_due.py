"""What a customer owes after a credit note: one figure on the page, in the PDF, the API and the finance
export; and a line a dispute settled is not disputed again."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from billing.models import Invoice
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from tests.factories import signing_agent
from tests.finance.support import csv_rows
from tests.ledger.support import member_client, november_invoice, priced_contract, staff_client
from tests.pdf_text import pdf_text

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


@pytest.fixture
def settled(client: Client) -> dict[str, Any]:
    """An invoice of 40 requests (2.00) whose requests line finance credited 1.00 through a dispute."""
    contract = priced_contract(currency="CNY")
    agent = signing_agent(contract)
    body = agent.batch([agent.record(contract) for _ in range(40)]).body()
    assert client.post("/v1/ingest/batches", body, content_type="application/x-ndjson").status_code == 200
    invoice = november_invoice(contract)
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    line = invoice.lines.get(dimension="requests")
    customer = member_client(contract, "alice")
    opened = customer.post(
        "/v1/ledger/disputes", {"line": line.pk, "reason": "one failed"}, "application/json"
    )
    accepted = staff_client().post(
        f"/v1/ledger/disputes/{opened.json()['id']}/resolve",
        {"decision": "accept", "amount": "1.00", "comment": "half of them were 503s"},
        "application/json",
    )
    assert accepted.json()["credited"] == "1.00"
    return {"invoice": invoice, "line": line, "customer": customer, "dispute": opened.json()["id"]}


def _owed(invoice: Invoice) -> Decimal:
    return invoice.total - invoice.credits_applied - Decimal("1.00")


def test_a_credit_note_lowers_the_amount_due_everywhere(settled: dict[str, Any]) -> None:
    invoice = Invoice.objects.get(pk=settled["invoice"].pk)
    due = _owed(invoice)
    assert (invoice.credit_notes, invoice.amount_due) == (Decimal("1.00"), due)
    assert due > 0 and invoice.status == Invoice.Status.FINALIZED

    customer = settled["customer"]
    api = customer.get(f"/v1/invoices/{invoice.pk}").json()
    assert (api["credit_notes"], api["amount_due"]) == ("1.00", f"{due}")

    page = customer.get(f"/invoices/{invoice.pk}").content.decode()
    shown = re.search(r'data-testid="invoice-amount-due"><strong>([^<]+)<', page)
    assert shown is not None and f"{due:,}" in shown.group(1)
    assert re.search(r'data-testid="invoice-credit-notes">−[^<]*1\.00<', page)

    text = pdf_text(customer.get(f"/v1/invoices/{invoice.pk}.pdf").content)
    assert "Credit notes" in text and "-1.00" in text
    assert re.search(rf"Amount due\s+{re.escape(f'{due:,}')} CNY", text), text

    [row] = csv_rows(_finance(), f"/finance/invoices/download.csv?tenant={invoice.tenant.code}")
    assert (row["credit_notes"], row["amount_due"]) == ("1.00", f"{due}")


def _finance() -> Client:
    """The finance user who resolved the dispute, signed in again."""
    client = Client()
    client.force_login(User.objects.get(username="finance"))
    return client


def test_a_settled_line_cannot_be_disputed_again(settled: dict[str, Any]) -> None:
    customer, line = settled["customer"], settled["line"]
    again = customer.post("/v1/ledger/disputes", {"line": line.pk, "reason": "more"}, "application/json")
    assert (again.status_code, again.json()["code"]) == (409, "line_settled")
    page = customer.get(f"/invoices/{settled['invoice'].pk}").content.decode()
    assert f'data-testid="dispute-button-{line.pk}"' not in page
    assert re.search(rf'data-testid="line-dispute-{line.pk}">Settled #{settled["dispute"]}<', page)
