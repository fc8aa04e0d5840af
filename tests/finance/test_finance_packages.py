"""The package lifecycle report: calls and customers from the records, renewals from the contracts,
base and outcome fees and net revenue from the issued invoices, per package and quarter or month; a
package under 500 calls in two consecutive closed quarters is flagged for retirement."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from billing.services import generate_invoice
from catalog.models import ComputePackage
from common.periods import month_bounds
from contracts.models import ContractPrice
from finance import reports
from tests.billing.usage import at, send
from tests.factories import ContractFactory, TenantFactory
from tests.finance.support import csv_rows, floats, page_rows, parquet_table, shown_as_csv, staff_client

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
D = Decimal
NOW = datetime(2026, 12, 6, tzinfo=UTC)  # 2026-Q4 is still open
# busy's August invoices: base fee 100.00 (bolt), outcome 2,000.00 and 401 requests at 0.01 (acme).
AUGUST = ("CNY", D("100.00"), D("2000.00"), D("2104.01"))
FIGURES = (
    "package",
    "period",
    "state",
    "calls",
    "active_customers",
    "contracts_ended",
    "contracts_renewed",
    "renewal_rate",
    "currency",
    "base_revenue",
    "outcome_revenue",
    "net_revenue",
    "retirement",
)


def _when(month: int, day: int, hour: int = 0) -> datetime:
    return datetime(2026, month, day, hour, tzinfo=UTC)


@pytest.fixture
def packages(clickhouse: None) -> None:
    """busy: acme's contract ended 31 July and was renewed from 1 August (requests at 0.01, outcomes at
    2,000); bolt's (base fee 100.00) ended 15 September unrenewed. August: acme 400 calls and 1 with a
    verified outcome, bolt 99: 500 calls. idle: carol's contract ended 10 May, renewed from 1 June; no
    call ever."""
    acme, bolt, carol = (TenantFactory.create(code=code) for code in ("acme", "bolt", "carol"))
    busy = ComputePackage.objects.create(code="busy", name="Busy")
    idle = ComputePackage.objects.create(code="idle", name="Idle")
    ContractFactory.create(tenant=acme, package=busy, ends_at=_when(7, 31, 12))
    renewed = ContractFactory.create(tenant=acme, package=busy, starts_at=_when(8, 1))
    ending = ContractFactory.create(tenant=bolt, package=busy, ends_at=_when(9, 15), base_fee=D("100.00"))
    ContractFactory.create(tenant=carol, package=idle, ends_at=_when(5, 10))
    ContractFactory.create(tenant=carol, package=idle, starts_at=_when(6, 1))
    ContractPrice.objects.create(contract=renewed, dimension="requests", unit_price=D("0.01"))
    ContractPrice.objects.create(contract=renewed, dimension="outcomes", unit_price=D("2000"))
    send(renewed, 400, at(2026, 8, 4))
    send(renewed, 1, at(2026, 8, 4), outcome={"type": "matched", "value": "2000.00", "ref": "o-1"})
    send(ending, 99, at(2026, 8, 5))
    august = month_bounds("2026-08")
    generate_invoice(renewed.pk, *august, now=NOW)
    generate_invoice(ending.pk, *august, now=NOW)


def _figures(rows: Any) -> list[tuple[Any, ...]]:
    return [tuple(row.get(k) for k in FIGURES) for row in rows]


@pytest.mark.usefixtures("packages")
def test_quarters_count_calls_customers_renewals_and_revenue_and_flag_packages_to_retire() -> None:
    table = reports.package_lifecycle("quarter", "2026-04", "2026-12", NOW)
    assert _figures(table.rows) == [
        ("busy", "2026-Q2", "closed", 0, 0, 0, 0, None, None, None, None, None, "retire"),
        ("busy", "2026-Q3", "closed", 500, 2, 2, 1, D("0.5000"), *AUGUST, ""),
        ("busy", "2026-Q4", "open", 0, 0, 0, 0, None, None, None, None, None, ""),
        ("idle", "2026-Q2", "closed", 0, 0, 1, 1, D("1.0000"), None, None, None, None, "retire"),
        ("idle", "2026-Q3", "closed", 0, 0, 0, 0, None, None, None, None, None, "retire"),
        ("idle", "2026-Q4", "open", 0, 0, 0, 0, None, None, None, None, None, ""),
    ]
    assert floats(table) == []


@pytest.mark.usefixtures("packages")
def test_months_split_the_quarter_and_flag_nothing() -> None:
    table = reports.package_lifecycle("month", "2026-07", "2026-09", NOW)
    busy = [row for row in _figures(table.rows) if row[0] == "busy"]
    assert busy == [
        ("busy", "2026-07", "closed", 0, 0, 1, 1, D("1.0000"), None, None, None, None, ""),
        ("busy", "2026-08", "closed", 500, 2, 0, 0, None, *AUGUST, ""),
        ("busy", "2026-09", "closed", 0, 0, 1, 0, D("0.0000"), None, None, None, None, ""),
    ]


def test_the_flag_needs_two_quiet_quarters_on_sale(clickhouse: None) -> None:
    """Both quarters under 500 calls: 499 then 500 keeps the package, 499 then 1 does not; a package
    first sold in the later quarter is not judged yet, however quiet."""
    kept, dropped, new = (
        ComputePackage.objects.create(code=code, name=code) for code in ("kept", "dropped", "new")
    )
    for package, counts in ((kept, (499, 500)), (dropped, (499, 1))):
        contract = ContractFactory.create(tenant=TenantFactory.create(), package=package)
        send(contract, counts[0], at(2026, 5, 2))
        send(contract, counts[1], at(2026, 8, 2))
    send(ContractFactory.create(package=new, starts_at=_when(7, 1)), 10, at(2026, 8, 2))
    rows = reports.package_lifecycle("quarter", "2026-07", "2026-09", NOW).rows
    assert [(r["package"], r["period"], r["calls"], r["retirement"]) for r in rows] == [
        ("dropped", "2026-Q3", 1, "retire"),
        ("kept", "2026-Q3", 500, ""),
        ("new", "2026-Q3", 10, ""),
    ]


@pytest.mark.usefixtures("packages")
def test_the_page_and_its_downloads_show_the_same_table() -> None:
    client = staff_client()
    url = "/finance/packages/?period=quarter&from=2026-04&to=2026-12"
    response = client.get(url)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-testid="finance-packages-flagged"' in html and "busy, idle" in html
    table = reports.package_lifecycle("quarter", "2026-04", "2026-12", datetime.now(UTC))
    assert page_rows(client, url, "finance-packages") == len(table.rows) == 6
    download = "/finance/packages/download.{}?period=quarter&from=2026-04&to=2026-12"
    assert csv_rows(client, download.format("csv")) == shown_as_csv(table)
    parquet = parquet_table(client, download.format("parquet"))
    assert parquet.num_rows == 6
    assert parquet.schema.field("net_revenue").type == pa.decimal128(20, 2)
    assert parquet.column("calls").to_pylist() == [0, 500, 0, 0, 0, 0]


@pytest.mark.parametrize(
    ("query", "code", "field"),
    [
        ("period=week", "invalid_filter", "period"),
        ("from=2026-12&to=2026-01", "invalid_filter", "from"),
        ("period=month&from=2020-01&to=2026-12", "invalid_filter", "from"),
        ("from=2026-13", "invalid_filter", "from"),
        ("month=2026-11", "unknown_filter", "month"),
    ],
)
def test_bad_filters_are_a_400_naming_the_field(query: str, code: str, field: str) -> None:
    response = staff_client().get(f"/finance/packages/download.csv?{query}")
    assert response.status_code == 400
    assert (response.json()["code"], response.json()["details"]["field"]) == (code, field)
