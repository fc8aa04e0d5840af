"""The dispute queue (open first, by age) and its resolve form, which uses the ledger's resolve service."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from billing.disputes import open_dispute, resolve_dispute
from billing.models import Dispute, Note
from billing.services import generate_invoice
from common.periods import month_bounds
from contracts.models import ContractPrice
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from tests.billing.usage import at, send
from tests.factories import ContractFactory, TenantFactory, UserFactory, customer
from tests.finance.support import csv_rows, parquet_table, staff_client

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
D = Decimal
NOV = month_bounds("2026-11")
QUEUE_COLUMNS = (
    "id",
    "status",
    "age_days",
    "tenant_code",
    "invoice_number",
    "line_dimension",
    "currency",
    "line_amount",
    "credited",
)


@pytest.fixture
def queue(clickhouse: None) -> dict[str, Any]:
    """November: 8 requests (0.40) and 800 input tokens (0.16). Disputes: one open for 10 days, one
    open for 2 days, one rejected 20 days ago."""
    contract = ContractFactory.create(tenant=TenantFactory.create(code="acme"))
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=D("0.05"))
    ContractPrice.objects.create(contract=contract, dimension="tokens_in", unit_price=D("0.0002"))
    send(contract, 8, at(2026, 11, 3))
    invoice = generate_invoice(contract.pk, *NOV)
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    lines = {line.dimension: line for line in invoice.lines.all()}
    alice = UserFactory.create(username="alice")
    acme = customer("acme", alice.pk)
    closed = open_dispute(alice, lines["requests"].pk, "earlier complaint", acme)
    resolve_dispute(None, closed.pk, "reject", "counts match the log")
    old = open_dispute(alice, lines["requests"].pk, "we sent fewer requests", acme)
    new = open_dispute(alice, lines["tokens_in"].pk, "token count too high", acme)
    now = timezone.now()
    for dispute, days in ((old, 10), (new, 2), (closed, 20)):
        Dispute.objects.filter(pk=dispute.pk).update(opened_at=now - timedelta(days=days, hours=1))
    return {"invoice": invoice, "old": old, "new": new, "closed": closed}


def test_open_disputes_come_first_oldest_first(queue: dict[str, Any]) -> None:
    response = staff_client().get("/finance/disputes/")
    assert response.status_code == 200
    rows = response.context["table"].rows
    number = queue["invoice"].number
    assert [tuple(r[k] for k in QUEUE_COLUMNS) for r in rows] == [
        (queue["old"].pk, "open", 10, "acme", number, "requests", "CNY", D("0.40"), D("0.00")),
        (queue["new"].pk, "open", 2, "acme", number, "tokens_in", "CNY", D("0.16"), D("0.00")),
        (queue["closed"].pk, "rejected", 20, "acme", number, "requests", "CNY", D("0.40"), D("0.00")),
    ]
    html = response.content.decode()
    assert 'data-testid="finance-disputes-table"' in html
    assert f'data-testid="finance-dispute-resolve-{queue["old"].pk}"' in html
    assert f'data-testid="finance-dispute-resolve-{queue["closed"].pk}"' not in html  # resolved: no form
    only_open = staff_client().get("/finance/disputes/?status=open").context["table"].rows
    assert [r["id"] for r in only_open] == [queue["old"].pk, queue["new"].pk]


def test_accepting_in_part_issues_the_credit_note_and_the_queue_shows_it(queue: dict[str, Any]) -> None:
    client = staff_client()
    pk = queue["old"].pk
    response = client.post(
        f"/finance/disputes/{pk}/resolve",
        {"decision": "accept", "amount": "0.10", "comment": "2 retries", "confirmed": "1"},
    )
    assert response.status_code == 302 and response["Location"] == "/finance/disputes/"
    note = Note.objects.get()
    assert (note.kind, note.amount, note.line_id) == ("credit", D("0.10"), queue["old"].line_id)
    assert Dispute.objects.get(pk=pk).status == "accepted"
    queue_page = client.get("/finance/disputes/")
    assert f"Dispute {pk}: Accepted." in queue_page.content.decode()
    rows = {r["id"]: r for r in queue_page.context["table"].rows}
    assert (rows[pk]["status"], rows[pk]["credited"], rows[pk]["credit_note"]) == (
        "accepted",
        D("0.10"),
        note.number,
    )
    again = client.post(f"/finance/disputes/{pk}/resolve", {"decision": "reject", "comment": ""})
    assert again.status_code == 409
    assert "is Accepted" in again.content.decode()


def test_rejecting_and_bad_form_input(queue: dict[str, Any]) -> None:
    client = staff_client()
    pk = queue["new"].pk
    assert (
        client.post(f"/finance/disputes/{pk}/resolve", {"decision": "accept", "amount": "abc"}).status_code
        == 400
    )
    assert (
        client.post(f"/finance/disputes/{pk}/resolve", {"decision": "customer_dependency"}).status_code == 400
    )
    too_much = client.post(
        f"/finance/disputes/{pk}/resolve", {"decision": "accept", "amount": "5.00", "confirmed": "1"}
    )
    assert too_much.status_code == 409  # more than the line: the ledger service refuses
    assert Dispute.objects.get(pk=pk).status == "open"
    assert client.post("/finance/disputes/999999/resolve", {"decision": "reject"}).status_code == 404
    done = client.post(
        f"/finance/disputes/{pk}/resolve", {"decision": "reject", "comment": "counts match", "confirmed": "1"}
    )
    assert done.status_code == 302
    assert Dispute.objects.get(pk=pk).status == "rejected" and not Note.objects.exists()


def test_no_decision_is_preselected_and_each_is_confirmed_first(queue: dict[str, Any]) -> None:
    client = staff_client()
    pk = queue["new"].pk
    form = client.get("/finance/disputes/").content.decode()
    assert '<option value="" selected disabled>Decide…</option>' in form
    assert "/v1/ledger/disputes" not in form and "//" not in form.replace("://", "")

    review = client.post(f"/finance/disputes/{pk}/resolve", {"decision": "accept", "comment": "agreed"})

    assert review.status_code == 200
    page = review.content.decode()
    assert 'data-testid="finance-dispute-confirm-decision">Accept: a credit note on the line<' in page
    assert 'data-testid="finance-dispute-confirm-amount">0.16 CNY<' in page  # the whole line
    assert Dispute.objects.get(pk=pk).status == "open" and not Note.objects.exists()
    done = client.post(
        f"/finance/disputes/{pk}/resolve", {"decision": "accept", "comment": "agreed", "confirmed": "1"}
    )
    assert done.status_code == 302
    assert Note.objects.get().amount == D("0.16")


def test_dispute_downloads_parse_back_to_the_rows(queue: dict[str, Any]) -> None:
    client = staff_client()
    resolve_dispute(None, queue["new"].pk, "accept", "agreed")  # the whole line: 0.16
    rows = csv_rows(client, "/finance/disputes/download.csv")
    assert [(r["id"], r["status"], r["age_days"], r["line_amount"], r["credited"]) for r in rows] == [
        (str(queue["old"].pk), "open", "10", "0.40", "0.00"),
        (str(queue["closed"].pk), "rejected", "20", "0.40", "0.00"),  # resolved ones after, oldest first
        (str(queue["new"].pk), "accepted", "2", "0.16", "0.16"),
    ]
    table = parquet_table(client, "/finance/disputes/download.parquet")
    parsed = table.to_pylist()
    assert [(r["id"], r["credited"], r["opened_at"].tzname()) for r in parsed] == [
        (queue["old"].pk, D("0.00"), "UTC"),
        (queue["closed"].pk, D("0.00"), "UTC"),
        (queue["new"].pk, D("0.16"), "UTC"),
    ]
