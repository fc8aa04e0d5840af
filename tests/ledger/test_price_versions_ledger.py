"""Disputes on an invoice whose price changed within the period: excluded records are credited at the
price of the version that billed them, on that version's line (real ClickHouse and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from billing.models import Invoice, Note
from contracts.models import Contract, ContractPrice
from tests.factories import ContractFactory, signing_agent
from tests.ledger.support import member_client, november_invoice, send, staff_client

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
D = Decimal
CHANGE = datetime(2026, 11, 15, tzinfo=UTC)
BEFORE_NS = int(datetime(2026, 11, 10, tzinfo=UTC).timestamp()) * 10**9
AFTER_NS = int(datetime(2026, 11, 20, tzinfo=UTC).timestamp()) * 10**9


def invoiced(client: Client, included_after: int = 0) -> tuple[Contract, Invoice, list[dict[str, Any]]]:
    """tokens_in at 0.0002, from 15 November at 0.0001 (with `included_after` free); 2 records of
    1,000 tokens before the change and 2 after. Returns the records before it."""
    contract = ContractFactory.create()
    prices = ContractPrice.objects
    prices.create(contract=contract, dimension="tokens_in", unit_price=D("0.0002"))
    prices.create(
        contract=contract,
        dimension="tokens_in",
        unit_price=D("0.0001"),
        included_quantity=D(included_after),
        effective_from=CHANGE,
    )
    agent = signing_agent(contract)
    before = [agent.record(contract, start_ns=BEFORE_NS + k * 10**9, tokens_in=1000) for k in range(2)]
    after = [agent.record(contract, start_ns=AFTER_NS + k * 10**9, tokens_in=1000) for k in range(2)]
    send(client, agent, [*before, *after])
    return contract, november_invoice(contract), before


def exclude(contract: Contract, invoice: Invoice, records: list[str]) -> dict[str, Any]:
    old_line = invoice.lines.filter(dimension="tokens_in").order_by("pk").first()
    assert old_line is not None
    opened = member_client(contract, "alice").post(
        "/v1/ledger/disputes", {"line": old_line.pk, "reason": "our gateway answered 503"}, "application/json"
    )
    assert opened.status_code == 201, opened.content
    resolved = staff_client().post(
        f"/v1/ledger/disputes/{opened.json()['id']}/resolve",
        {"decision": "customer_dependency", "records": records},
        "application/json",
    )
    assert resolved.status_code == 200, resolved.content
    return dict(resolved.json())


def notes() -> list[tuple[str, Decimal]]:
    return [(n.line.description if n.line else "", n.amount) for n in Note.objects.order_by("id")]


OLD = "Input tokens (2026-11-01 00:00 – 2026-11-15 00:00 UTC)"
NEW = "Input tokens (2026-11-15 00:00 – 2026-12-01 00:00 UTC)"


def test_a_record_of_the_older_version_is_credited_at_the_older_price(client: Client) -> None:
    contract, invoice, before = invoiced(client)
    # 2,000 × 0.0002 = 0.40 and 2,000 × 0.0001 = 0.20
    assert [(x.description, x.amount) for x in invoice.lines.all()] == [(OLD, D("0.40")), (NEW, D("0.20"))]

    body = exclude(contract, invoice, [before[0]["record_id"]])

    assert body["credited"] == "0.20"  # 1,000 × 0.0002, on the older version's line only
    assert notes() == [(OLD, D("0.20"))]


def test_the_allowance_freed_before_the_change_is_credited_in_time_order(client: Client) -> None:
    contract, invoice, before = invoiced(client, included_after=1500)
    # The newest allowance, 1,500, is consumed in time order: 500 × 0.0002 = 0.10 before the change,
    # 2,000 × 0.0001 = 0.20 after it.
    assert [x.amount for x in invoice.lines.all()] == [D("0.10"), D("0.20")]

    body = exclude(contract, invoice, [before[0]["record_id"]])

    # Without the record, the 1,000 tokens before the change are free and 500 after it:
    # 0.00 and 1,500 × 0.0001 = 0.15; each line gives back its difference, 0.10 and 0.05.
    assert body["credited"] == "0.15"
    assert notes() == [(OLD, D("0.10")), (NEW, D("0.05"))]
