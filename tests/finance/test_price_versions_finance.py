"""Reconciliation of an invoice whose price changed within the period: one row per dimension, adding
up the lines of its versions (and its period maximum), so no false difference. Real records through
ingest and a real invoice run."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from billing.services import generate_invoice
from common.periods import month_bounds
from contracts.models import ContractPrice
from finance.reconciliation import ReconciliationFilter, reconciliation_rows
from tests.billing.usage import at, send
from tests.factories import ContractFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
D = Decimal
NOV = month_bounds("2026-11")
CHANGE = datetime(2026, 11, 15, tzinfo=UTC)


def test_a_price_change_reconciles_as_one_row_per_dimension() -> None:
    contract = ContractFactory.create(code="versions")
    prices = ContractPrice.objects
    prices.create(contract=contract, dimension="requests", unit_price=D("0.01"))
    prices.create(contract=contract, dimension="tokens_out", unit_price=D("0.00003"))
    prices.create(
        contract=contract,
        dimension="tokens_out",
        unit_price=D("0.00002"),
        properties={"maximum": "40"},
        effective_from=CHANGE,
    )
    send(contract, 10, at(2026, 11, 3), tokens_out=100_000)
    send(contract, 15, at(2026, 11, 20), tokens_out=100_000)
    invoice = generate_invoice(contract.pk, *NOV)  # finalised on the real clock (grace 0)
    # tokens_out: 1,000,000 × 0.00003 = 30.00, 1,500,000 × 0.00002 = 30.00, capped at 40: −20.00
    assert [(x.dimension, x.quantity, x.amount) for x in invoice.lines.all()] == [
        ("requests", D(25), D("0.25")),
        ("tokens_out", D(1_000_000), D("30.00")),
        ("tokens_out", D(1_500_000), D("30.00")),
        ("tokens_out", D(0), D("-20.00")),
    ]

    rows = reconciliation_rows(ReconciliationFilter(contract="versions"))

    assert [
        (r["dimension"], r["usage_total"], r["invoiced"], r["unexplained"], r["difference"], r["status"])
        for r in rows
    ] == [
        ("requests", D(25), D(25), D(0), D(0), "match"),
        ("tokens_out", D(2_500_000), D(2_500_000), D(0), D(0), "match"),
    ]
    assert [(r["line_amount"], r["net_amount"]) for r in rows] == [
        (D("0.25"), D("0.25")),
        (D("40.00"), D("40.00")),
    ]
