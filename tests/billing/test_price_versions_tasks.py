"""The invoice run over a contract whose price changes within the month: the one aggregate query
measures its segments too, and the invoice is the one generate_invoice makes alone. Real records
through ingest, real ClickHouse and PostgreSQL."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from billing.models import Invoice
from billing.services import generate_invoice
from billing.tasks import run_invoices
from clickhouse_store import query
from common.periods import month_bounds
from contracts.models import Contract, ContractPrice
from tests.billing.usage import at, send
from tests.factories import ContractFactory

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]
D = Decimal
NOV = month_bounds("2026-11")
CHANGE = datetime(2026, 11, 15, tzinfo=UTC)


def changing_contract() -> Contract:
    c = ContractFactory.create()
    ContractPrice.objects.create(contract=c, dimension="requests", unit_price=D("0.01"))
    ContractPrice.objects.create(contract=c, dimension="tokens_out", unit_price=D("0.00003"))
    ContractPrice.objects.create(
        contract=c, dimension="tokens_out", unit_price=D("0.00002"), effective_from=CHANGE
    )
    send(c, 10, at(2026, 11, 3), tokens_out=100_000)
    send(c, 5, at(2026, 11, 20), tokens_out=200_000)
    return c


def lines(invoice: Invoice) -> list[tuple[str, str, Decimal, Decimal, Decimal]]:
    return [(x.dimension, x.description, x.quantity, x.unit_price, x.amount) for x in invoice.lines.all()]


def test_the_run_rates_a_price_change_in_its_one_usage_query(monkeypatch: pytest.MonkeyPatch) -> None:
    run = changing_contract()
    usage_queries: list[str] = []
    select = query.select

    def recording(sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        if "GROUP BY tenant, contract, segment" in sql:
            usage_queries.append(sql)
        return select(sql, params)

    monkeypatch.setattr(query, "select", recording)
    assert run_invoices("2026-11") == {"contracts": 1, "finalized": 1, "failed": {}}
    monkeypatch.undo()

    assert len(usage_queries) == 1  # no second query for the contract's segments
    alone = changing_contract()  # the same terms and records, invoiced on its own
    expected = lines(generate_invoice(alone.pk, *NOV))
    assert lines(Invoice.objects.get(contract=run)) == expected
    assert [(q, a) for _, _, q, _, a in expected] == [
        (D(15), D("0.15")),  # 15 × 0.01
        (D(1_000_000), D("30.00")),  # 1,000,000 × 0.00003
        (D(1_000_000), D("20.00")),  # 1,000,000 × 0.00002
    ]
