"""Reconciliation: ClickHouse usage vs invoiced quantities, each difference in its category, an
unexplained one flagged. Real records through ingest, real invoice runs, real disputes and exclusions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from django.contrib.auth.models import User

from accounts.access import PLATFORM
from billing.disputes import open_dispute, resolve_dispute
from billing.evidence import Window
from billing.selectors import period_usage
from billing.services import generate_invoice
from common.periods import month_bounds
from contracts.models import Contract, ContractPrice
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from sla.models import Exclusion
from sla.services import declare_exclusion
from tests.billing.usage import at, send
from tests.factories import ContractFactory, TenantFactory
from tests.finance.support import csv_rows, floats, parquet_table, shown_as_csv, staff_client

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
D = Decimal
OCT, NOV = month_bounds("2026-10"), month_bounds("2026-11")
OUTAGE = datetime(2026, 10, 20, 10, tzinfo=UTC)
QUANTITIES = (
    "usage_total",
    "late",
    "late_decision",
    "excluded",
    "unexplained",
    "invoiced",
    "disputed",
    "included_quota",
    "net_billable",
    "difference",
    "status",
)
AMOUNTS = ("line_amount", "credited", "net_amount")


def _contract(code: str, included: int = 0, **terms: Any) -> Contract:
    contract = ContractFactory.create(code=code, tenant=TenantFactory.create(code=f"t-{code}"), **terms)
    ContractPrice.objects.create(
        contract=contract, dimension="requests", unit_price=D("0.50"), included_quantity=included
    )
    return contract


@pytest.fixture
def october(clickhouse: None) -> dict[str, Any]:
    """October invoices finalised on the real clock (grace 0), one contract per kind of difference."""
    ops = User.objects.create_user("ops", is_staff=True)
    found: dict[str, Any] = {}

    match = _contract("match")
    send(match, 4, at(2026, 10, 5))
    found["match"] = generate_invoice(match.pk, *OCT)

    late = _contract("late")
    send(late, 4, at(2026, 10, 5))
    found["late"] = generate_invoice(late.pk, *OCT)
    send(late, 3, at(2026, 10, 29))  # after October was finalised
    send(late, 1, at(2026, 11, 3))
    found["late_billed_on"] = generate_invoice(late.pk, *NOV)  # bills the 3 as an adjustment line

    paused = _contract("paused", pause_billing_on_customer_dependency=True)
    send(paused, 5, at(2026, 10, 5))
    send(paused, 3, int(OUTAGE.timestamp()) * 10**9)
    declare_exclusion(
        paused,
        kind=Exclusion.Kind.CUSTOMER_DEPENDENCY,
        starts_at=OUTAGE,
        ends_at=OUTAGE + timedelta(minutes=10),
        reason="the customer's gateway answered 503",
        declared_by=ops,
    )
    found["paused"] = generate_invoice(paused.pk, *OCT)

    disputed = _contract("disputed")
    send(disputed, 4, at(2026, 10, 5))
    send(disputed, 2, at(2026, 10, 20))
    found["disputed"] = generate_invoice(disputed.pk, *OCT)
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    line = found["disputed"].lines.get(dimension="requests")
    dispute = open_dispute(ops, line.pk, "our gateway failed on the 20th", PLATFORM)
    resolve_dispute(
        ops,
        dispute.pk,
        "customer_dependency",
        "503s",
        window=Window(at(2026, 10, 20), at(2026, 10, 21), "ok"),
    )

    quota = _contract("quota", included=5)
    send(quota, 8, at(2026, 10, 5))
    found["quota"] = generate_invoice(quota.pk, *OCT)

    lost = _contract("lost")
    send(lost, 4, at(2026, 10, 5))
    stale = period_usage(lost.tenant.code, lost.code, *OCT)  # measured, then one more record arrives
    send(lost, 1, at(2026, 10, 6))
    found["lost"] = generate_invoice(lost.pk, *OCT, usage=stale)  # finalised on the stale measure
    return found


def _figures(rows: list[dict], columns: tuple[str, ...]) -> dict[str, tuple]:
    return {row["contract_code"]: tuple(row[k] for k in columns) for row in rows}


def test_every_difference_is_categorised_and_the_unexplained_one_flagged(october: dict[str, Any]) -> None:
    response = staff_client().get("/finance/reconciliation/?month=2026-10")
    assert response.status_code == 200
    rows = response.context["table"].rows
    assert {(r["invoice_number"], r["month"], r["dimension"]) for r in rows} == {
        (october[name].number, "2026-10", "requests")
        for name in ("match", "late", "paused", "disputed", "quota", "lost")
    }
    # usage, late, decision, excluded, unexplained, invoiced, disputed, quota, net, difference, result
    assert _figures(rows, QUANTITIES) == {
        "match": (D(4), D(0), "", D(0), D(0), D(4), D(0), D(0), D(4), D(0), "match"),
        # 3 records arrived after finalisation; November billed them as an adjustment line
        "late": (D(7), D(3), "adjusted", D(0), D(0), D(4), D(0), D(0), D(4), D(3), "explained"),
        # 3 records in an SLA customer-dependency window of a contract that pauses billing for it
        "paused": (D(8), D(0), "", D(3), D(0), D(5), D(0), D(0), D(5), D(3), "explained"),
        # a dispute excluded 2 billed records after finalisation and credited them (2 × 0.50)
        "disputed": (D(6), D(0), "", D(0), D(0), D(6), D(2), D(0), D(4), D(2), "explained"),
        # 5 requests free each month: 3 billed
        "quota": (D(8), D(0), "", D(0), D(0), D(8), D(0), D(5), D(3), D(5), "explained"),
        # one record arrived before finalisation but the invoice never counted it
        "lost": (D(5), D(0), "", D(0), D(1), D(4), D(0), D(0), D(4), D(1), "unexplained"),
    }
    assert _figures(rows, AMOUNTS) == {
        "match": (D("2.00"), D("0.00"), D("2.00")),
        "late": (D("2.00"), D("0.00"), D("2.00")),
        "paused": (D("2.50"), D("0.00"), D("2.50")),
        "disputed": (D("3.00"), D("1.00"), D("2.00")),
        "quota": (D("1.50"), D("0.00"), D("1.50")),
        "lost": (D("2.00"), D("0.00"), D("2.00")),
    }
    assert floats(response.context["table"]) == []
    late_row = next(r for r in rows if r["contract_code"] == "late")
    assert late_row["late_billed_on"] == october["late_billed_on"].number
    assert [r["contract_code"] for r in response.context["unexplained"]] == ["lost"]
    html = response.content.decode()
    assert 'data-testid="finance-reconciliation-unexplained"' in html
    assert html.count('data-status="unexplained"') == 1
    assert 'data-testid="finance-reconciliation-all-explained"' not in html


def test_a_report_without_unexplained_differences_says_so(october: dict[str, Any]) -> None:
    client = staff_client()
    response = client.get("/finance/reconciliation/?month=2026-10&tenant=t-late")
    assert [r["contract_code"] for r in response.context["table"].rows] == ["late"]
    html = response.content.decode()
    assert 'data-testid="finance-reconciliation-all-explained"' in html
    assert 'data-testid="finance-reconciliation-unexplained"' not in html
    november = client.get("/finance/reconciliation/?month=2026-11&contract=late").context["table"].rows
    assert [(r["usage_total"], r["late"], r["invoiced"], r["status"]) for r in november] == [
        (D(1), D(0), D(1), "match")
    ]


def test_reconciliation_downloads_parse_back_to_the_rows(october: dict[str, Any]) -> None:
    client = staff_client()
    shown = client.get("/finance/reconciliation/?month=2026-10").context["table"]
    keys = [c.key for c in shown.columns]
    rows = csv_rows(client, "/finance/reconciliation/download.csv?month=2026-10")
    assert rows == shown_as_csv(shown)
    lost = next(r for r in rows if r["contract_code"] == "lost")
    assert (lost["usage_total"], lost["invoiced"], lost["unexplained"], lost["status"]) == (
        "5.000000",
        "4.000000",
        "1.000000",
        "unexplained",
    )
    table = parquet_table(client, "/finance/reconciliation/download.parquet?month=2026-10")
    assert table.schema.field("usage_total").type == pa.decimal128(24, 6)
    assert table.schema.field("net_amount").type == pa.decimal128(20, 2)
    parsed = table.to_pylist()
    assert parsed == [{k: row[k] for k in keys} for row in shown.rows]
    disputed = next(r for r in parsed if r["contract_code"] == "disputed")
    assert (disputed["disputed"], disputed["credited"], disputed["net_amount"]) == (
        D(2),
        D("1.00"),
        D("2.00"),
    )
