"""Revenue by package, tenant and month: finalised and paid invoices net of notes, never across currencies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pyarrow as pa
import pytest

from billing.services import generate_invoice, void_invoice
from billing.settlement import issue_note, mark_paid
from catalog.models import ComputePackage
from common.periods import month_bounds
from contracts.models import ContractPrice
from tests.billing.usage import at, send
from tests.factories import ContractFactory, TenantFactory
from tests.finance.support import csv_rows, floats, parquet_table, staff_client

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
D = Decimal
OCT, NOV = month_bounds("2026-10"), month_bounds("2026-11")
DEC_2 = datetime(2026, 12, 2, tzinfo=UTC)
FIGURES = ("invoices", "invoiced", "credit_notes", "debit_notes", "net_revenue")


@pytest.fixture
def billed(clickhouse: None) -> None:
    """acme (gpu-small): October 2.00 CNY paid, November 3.00 CNY with a 0.50 credit note, November
    3.00 USD. bolt (gpu-large): November 4.00 CNY with a 1.00 debit note; a voided October and an
    invoice still in its grace period, neither of which is revenue."""
    acme, bolt = TenantFactory.create(code="acme"), TenantFactory.create(code="bolt")
    small = ComputePackage.objects.create(code="gpu-small", name="Small")
    large = ComputePackage.objects.create(code="gpu-large", name="Large")
    a1 = ContractFactory.create(tenant=acme, package=small)
    a2 = ContractFactory.create(tenant=acme, package=small, currency="USD", tax_rate=D("0.06"))
    b1 = ContractFactory.create(tenant=bolt, package=large)
    b2 = ContractFactory.create(tenant=bolt, package=large, grace_days=5)
    for contract, price in ((a1, "0.50"), (a2, "1.00"), (b1, "2.00"), (b2, "2.00")):
        ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=D(price))
    send(a1, 4, at(2026, 10, 3))
    send(a1, 6, at(2026, 11, 3))
    send(a2, 3, at(2026, 11, 4))
    send(b1, 1, at(2026, 10, 5))
    send(b1, 2, at(2026, 11, 5))
    send(b2, 5, at(2026, 11, 6))
    mark_paid(generate_invoice(a1.pk, *OCT, now=DEC_2))
    issue_note(generate_invoice(a1.pk, *NOV, now=DEC_2), "credit", D("0.50"), "goodwill")
    generate_invoice(a2.pk, *NOV, now=DEC_2)
    void_invoice(generate_invoice(b1.pk, *OCT, now=DEC_2))
    issue_note(generate_invoice(b1.pk, *NOV, now=DEC_2), "debit", D("1.00"), "courier")
    generate_invoice(b2.pk, *NOV, now=NOV[1] + timedelta(days=1))


def _figures(rows: list[dict], keys: tuple[str, ...]) -> list[tuple]:
    return [tuple(row[k] for k in (*keys, "currency", *FIGURES)) for row in rows]


@pytest.mark.usefixtures("billed")
def test_revenue_by_month_package_and_tenant() -> None:
    response = staff_client().get("/finance/revenue/")
    assert response.status_code == 200
    assert _figures(response.context["table"].rows, ("month", "package", "tenant")) == [
        ("2026-10", "gpu-small", "acme", "CNY", 1, D("2.00"), D("0.00"), D("0.00"), D("2.00")),
        ("2026-11", "gpu-large", "bolt", "CNY", 1, D("4.00"), D("0.00"), D("1.00"), D("5.00")),
        ("2026-11", "gpu-small", "acme", "CNY", 1, D("3.00"), D("0.50"), D("0.00"), D("2.50")),
        ("2026-11", "gpu-small", "acme", "USD", 1, D("3.00"), D("0.00"), D("0.00"), D("3.00")),
    ]
    assert floats(response.context["table"]) == []
    html = response.content.decode()
    assert 'data-testid="finance-revenue-table"' in html
    assert 'data-testid="finance-revenue-download-csv"' in html


@pytest.mark.usefixtures("billed")
@pytest.mark.parametrize(
    ("query", "keys", "expected"),
    [
        (
            "by=package",
            ("package",),
            [
                ("gpu-large", "CNY", 1, D("4.00"), D("0.00"), D("1.00"), D("5.00")),
                ("gpu-small", "CNY", 2, D("5.00"), D("0.50"), D("0.00"), D("4.50")),
                ("gpu-small", "USD", 1, D("3.00"), D("0.00"), D("0.00"), D("3.00")),
            ],
        ),
        (
            "by=tenant",
            ("tenant",),
            [
                ("acme", "CNY", 2, D("5.00"), D("0.50"), D("0.00"), D("4.50")),
                ("acme", "USD", 1, D("3.00"), D("0.00"), D("0.00"), D("3.00")),
                ("bolt", "CNY", 1, D("4.00"), D("0.00"), D("1.00"), D("5.00")),
            ],
        ),
        (
            "by=month",
            ("month",),
            [
                ("2026-10", "CNY", 1, D("2.00"), D("0.00"), D("0.00"), D("2.00")),
                ("2026-11", "CNY", 2, D("7.00"), D("0.50"), D("1.00"), D("7.50")),
                ("2026-11", "USD", 1, D("3.00"), D("0.00"), D("0.00"), D("3.00")),
            ],
        ),
        (
            "by=tenant&from=2026-11&to=2026-11&currency=CNY",
            ("tenant",),
            [
                ("acme", "CNY", 1, D("3.00"), D("0.50"), D("0.00"), D("2.50")),
                ("bolt", "CNY", 1, D("4.00"), D("0.00"), D("1.00"), D("5.00")),
            ],
        ),
    ],
)
def test_revenue_groupings_and_filters(query: str, keys: tuple[str, ...], expected: list[tuple]) -> None:
    response = staff_client().get(f"/finance/revenue/?{query}")
    assert _figures(response.context["table"].rows, keys) == expected


@pytest.mark.usefixtures("billed")
def test_revenue_downloads_parse_back_to_the_rows() -> None:
    client = staff_client()
    rows = csv_rows(client, "/finance/revenue/download.csv?by=package")
    assert list(rows[0]) == ["package", "currency", *FIGURES]
    assert [tuple(r.values()) for r in rows] == [
        ("gpu-large", "CNY", "1", "4.00", "0.00", "1.00", "5.00"),
        ("gpu-small", "CNY", "2", "5.00", "0.50", "0.00", "4.50"),
        ("gpu-small", "USD", "1", "3.00", "0.00", "0.00", "3.00"),
    ]
    table = parquet_table(client, "/finance/revenue/download.parquet?by=package")
    assert table.schema.field("net_revenue").type == pa.decimal128(20, 2)
    assert [tuple(r.values()) for r in table.to_pylist()] == [
        ("gpu-large", "CNY", 1, D("4.00"), D("0.00"), D("1.00"), D("5.00")),
        ("gpu-small", "CNY", 2, D("5.00"), D("0.50"), D("0.00"), D("4.50")),
        ("gpu-small", "USD", 1, D("3.00"), D("0.00"), D("0.00"), D("3.00")),
    ]


def test_an_unknown_grouping_is_a_400() -> None:
    response = staff_client().get("/finance/revenue/download.csv?by=agent")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"
