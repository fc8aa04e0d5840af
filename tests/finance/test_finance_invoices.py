"""All invoices: filters, totals per currency, and downloads that parse back to the rows shown."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from billing.models import Invoice
from billing.services import generate_invoice, void_invoice
from common.periods import month_bounds
from contracts.models import ContractPrice
from finance.reports import invoices as invoice_report
from finance.selectors import InvoiceFilter
from tests.billing.usage import at, send
from tests.factories import ContractFactory, TenantFactory
from tests.finance.support import csv_rows, floats, page_rows, parquet_table, shown_as_csv, staff_client

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
D = Decimal
OCT, NOV = month_bounds("2026-10"), month_bounds("2026-11")
DEC_2 = datetime(2026, 12, 2, tzinfo=UTC)


@pytest.fixture
def invoices(clickhouse: None) -> dict[str, Any]:
    """Tenant a: October (then voided) and November in CNY. Tenant b: November in USD with 6 % tax,
    and a CNY invoice still in its grace period."""
    a, b = TenantFactory.create(code="acme"), TenantFactory.create(code="bolt")
    a1 = ContractFactory.create(code="acme-main", tenant=a)
    b1 = ContractFactory.create(code="bolt-usd", tenant=b, currency="USD", tax_rate=D("0.06"))
    b2 = ContractFactory.create(code="bolt-cny", tenant=b, grace_days=5)
    for contract, price in ((a1, "0.50"), (b1, "1.00"), (b2, "0.50")):
        ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=D(price))
    send(a1, 4, at(2026, 10, 7))
    send(a1, 6, at(2026, 11, 7))
    send(b1, 3, at(2026, 11, 8))
    send(b2, 2, at(2026, 11, 9))
    october = generate_invoice(a1.pk, *OCT, now=DEC_2)
    november = generate_invoice(a1.pk, *NOV, now=DEC_2)
    usd = generate_invoice(b1.pk, *NOV, now=DEC_2)
    grace = generate_invoice(b2.pk, *NOV, now=NOV[1] + timedelta(days=1))
    void_invoice(october, now=DEC_2)
    return {"october": october, "november": november, "usd": usd, "grace": grace}


def test_the_page_shows_every_invoice_and_totals_per_currency_without_void_ones(
    invoices: dict[str, Any],
) -> None:
    client = staff_client()
    response = client.get("/finance/invoices/")
    assert response.status_code == 200
    table, totals = response.context["table"], response.context["totals"]
    assert [(r["contract_code"], r["month"], r["status"], r["currency"], r["total"]) for r in table.rows] == [
        ("acme-main", "2026-11", "finalized", "CNY", D("3.00")),
        ("bolt-cny", "2026-11", "grace", "CNY", D("1.00")),
        ("bolt-usd", "2026-11", "finalized", "USD", D("3.18")),
        ("acme-main", "2026-10", "void", "CNY", D("2.00")),
    ]
    assert [(r["currency"], r["invoices"], r["subtotal"], r["tax"], r["total"]) for r in totals.rows] == [
        ("CNY", 2, D("4.00"), D("0.00"), D("4.00")),
        ("USD", 1, D("3.00"), D("0.18"), D("3.18")),
    ]
    assert floats(table) == floats(totals) == []
    html = response.content.decode()
    for testid in (
        "finance-invoices-table",
        "finance-invoice-totals-table",
        "finance-invoices-download-csv",
        "finance-invoices-download-parquet",
    ):
        assert f'data-testid="{testid}"' in html


@pytest.mark.parametrize(
    ("query", "numbers"),
    [
        ("status=finalized", ["november", "usd"]),
        ("tenant=acme", ["november", "october"]),
        ("month=2026-10", ["october"]),
        ("currency=USD", ["usd"]),
        ("tenant=bolt&currency=CNY&month=2026-11", ["grace"]),
        ("tenant=nobody", []),
    ],
)
def test_filters(invoices: dict[str, Any], query: str, numbers: list[str]) -> None:
    client = staff_client()
    response = client.get(f"/finance/invoices/?{query}")
    assert [row["id"] for row in response.context["table"].rows] == [invoices[n].pk for n in numbers]
    assert page_rows(client, f"/finance/invoices/?{query}", "finance-invoices") == len(numbers)
    assert [r["id"] for r in csv_rows(client, f"/finance/invoices/download.csv?{query}")] == [
        str(invoices[n].pk) for n in numbers
    ]


def test_bad_filters_answer_400_with_a_stable_code(invoices: dict[str, Any]) -> None:
    client = staff_client()
    page = client.get("/finance/invoices/?status=lost")
    assert page.status_code == 400
    assert 'data-code="invalid_filter"' in page.content.decode()
    download = client.get("/finance/invoices/download.parquet?month=2026-13")
    assert download.status_code == 400
    assert download.json()["code"] == "invalid_filter"
    assert download.json()["details"] == {"field": "month", "value": "2026-13"}
    assert client.get("/finance/invoices/download.xlsx").status_code == 404


@pytest.mark.parametrize("report", ["invoices", "revenue", "costs", "disputes", "reconciliation"])
def test_a_filter_the_report_does_not_take_is_refused_not_ignored(report: str) -> None:
    client = staff_client()
    page = client.get(f"/finance/{report}/?period=2026-11")
    assert page.status_code == 400
    text = page.content.decode()
    assert 'data-code="unknown_filter"' in text and "This report has no filter period" in text
    download = client.get(f"/finance/{report}/download.csv?period=2026-11")
    assert (download.status_code, download.json()["code"]) == (400, "unknown_filter")
    assert download.json()["details"]["field"] == "period"


def test_csv_and_parquet_are_exactly_the_rows_shown(invoices: dict[str, Any]) -> None:
    client = staff_client()
    shown = invoice_report(InvoiceFilter(tenant="bolt"))
    keys = [c.key for c in shown.columns]

    rows = csv_rows(client, "/finance/invoices/download.csv?tenant=bolt")
    assert rows == shown_as_csv(shown)
    assert [(r["number"], r["currency"], r["subtotal"], r["tax"], r["total"]) for r in rows] == [
        ("", "CNY", "1.00", "0.00", "1.00"),
        (invoices["usd"].number, "USD", "3.00", "0.18", "3.18"),
    ]

    table = parquet_table(client, "/finance/invoices/download.parquet?tenant=bolt")
    assert table.schema.field("total").type == pa.decimal128(20, 2)
    assert table.schema.field("finalized_at").type == pa.timestamp("us", tz="UTC")
    assert table.schema.field("id").type == pa.int64()
    parsed = table.to_pylist()
    assert parsed == [{k: row[k] for k in keys} for row in shown.rows]
    assert [(r["currency"], r["tax"], r["total"]) for r in parsed] == [
        ("CNY", D("0.00"), D("1.00")),
        ("USD", D("0.18"), D("3.18")),
    ]
    assert all(isinstance(r["total"], Decimal) for r in parsed)
    assert parsed[1]["finalized_at"] == invoices["usd"].finalized_at == DEC_2
    assert Invoice.objects.get(pk=parsed[0]["id"]).status == "grace"


def test_invoice_numbers_link_to_the_invoice_and_the_table_scrolls(invoices: dict[str, Any]) -> None:
    page = staff_client().get("/finance/invoices/?tenant=bolt").content.decode()
    usd = invoices["usd"]
    assert f'<a href="/invoices/{usd.pk}">{usd.number}</a>' in page
    assert '<div class="table-scroll">' in page and 'class="data sticky-first"' in page
