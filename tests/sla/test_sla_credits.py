"""Closing an SLA month: a final report and, when earned, exactly one service credit."""

from __future__ import annotations

import base64
import threading
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection

from billing.services import generate_invoice
from common.periods import month_bounds
from ledger.services import publish_checkpoint
from sla.models import ServiceCredit, SlaReport
from sla.services import SlaError, close_period
from sla.tasks import close_due_periods_task, close_period_task
from tests.factories import ContractFactory, ContractPriceFactory, signing_agent
from tests.sla.helpers import make_policy, ns, records, store

pytestmark = pytest.mark.usefixtures("clickhouse")
AFTER_NOV = datetime(2026, 12, 2, tzinfo=UTC)


def contract_at_98_9_percent() -> Any:
    """989 of 1,000 valid requests served in November: 25 % credit; invoiced 989 × 0.05 = 49.45 CNY."""
    contract = ContractFactory.create()
    ContractPriceFactory.create(contract=contract, dimension="requests", unit_price=Decimal("0.05"))
    make_policy(contract)
    agent = signing_agent(contract)
    store(
        records(agent, contract, 989, ns(2026, 11, 10))
        + records(agent, contract, 11, ns(2026, 11, 11), status="error")
    )
    return contract


@pytest.mark.django_db
def test_close_twice_gives_one_credit_from_the_ladder() -> None:
    contract = contract_at_98_9_percent()
    invoice = generate_invoice(contract.pk, *month_bounds("2026-11"))
    assert invoice.total == Decimal("49.45")

    first = close_period(contract, "2026-11", now=AFTER_NOV)
    second = close_period(contract, "2026-11", now=AFTER_NOV)

    assert first.credit is not None and second.credit is not None
    assert first.credit.pk == second.credit.pk
    credit = ServiceCredit.objects.get(contract=contract)
    assert (credit.credit_percent, credit.fee_basis, credit.amount, credit.currency) == (
        Decimal("25"),
        Decimal("49.45"),
        Decimal("12.36"),
        "CNY",  # 12.3625 rounded half up
    )
    assert credit.report == first.report and credit.report.status == SlaReport.Status.FINAL
    assert credit.description == f"SLA service credit 25 % for 2026-11 (SLA report #{first.report.pk})"
    assert credit.status == ServiceCredit.Status.PENDING


@pytest.mark.django_db
def test_the_credit_waits_for_the_invoice_then_appears_once() -> None:
    contract = contract_at_98_9_percent()
    waiting = close_period_task.delay(contract.code, "2026-11").get()
    assert waiting["credit"] is None and waiting["waiting_for_invoice"] is True

    generate_invoice(contract.pk, *month_bounds("2026-11"))
    done = close_due_periods_task.delay(AFTER_NOV.isoformat()).get()
    again = close_due_periods_task.delay(AFTER_NOV.isoformat()).get()
    assert done == again == 1
    assert ServiceCredit.objects.filter(contract=contract).count() == 1
    assert SlaReport.objects.filter(contract=contract).count() == 1


@pytest.mark.django_db
def test_a_met_objective_earns_no_credit() -> None:
    contract = ContractFactory.create()
    make_policy(contract)
    agent = signing_agent(contract)
    store(
        records(agent, contract, 999, ns(2026, 11, 10))
        + records(agent, contract, 1, ns(2026, 11, 11), status="error")
    )
    result = close_period(contract, "2026-11", now=AFTER_NOV)
    assert (result.credit, result.waiting_for_invoice, result.report.credit_percent) == (None, False, 0)
    assert ServiceCredit.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    "now",
    [
        datetime(2026, 11, 29, tzinfo=UTC),
        datetime(2026, 11, 30, 16, 59, 59, tzinfo=UTC),  # Shanghai's November ended 59:59 ago: settling
    ],
)
def test_an_open_or_settling_month_cannot_close(now: datetime) -> None:
    contract = ContractFactory.create()
    make_policy(contract)
    with pytest.raises(SlaError) as raised:
        close_period(contract, "2026-11", now=now)
    assert raised.value.code == "period_open"
    assert (
        close_period(contract, "2026-11", now=datetime(2026, 11, 30, 17, tzinfo=UTC)).report.status == "final"
    )


@pytest.mark.django_db(transaction=True)
def test_concurrent_closes_give_one_credit() -> None:
    contract = contract_at_98_9_percent()
    generate_invoice(contract.pk, *month_bounds("2026-11"))
    barrier = threading.Barrier(4)
    credits: list[int] = []

    def run() -> None:
        barrier.wait()
        try:
            result = close_period(contract, "2026-11", now=AFTER_NOV)
            assert result.credit is not None
            credits.append(result.credit.pk)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(credits) == 4 and len(set(credits)) == 1
    assert (ServiceCredit.objects.count(), SlaReport.objects.count()) == (1, 1)


@pytest.mark.django_db
def test_records_sent_through_ingest_become_a_report_and_a_credit(client: Any) -> None:
    """The real path: signed batches over POST /v1/ingest/batches, the invoice, then the beat close job."""
    contract = ContractFactory.create()
    ContractPriceFactory.create(contract=contract, dimension="requests", unit_price=Decimal("2.00"))
    make_policy(contract, latency=[("l3", "150", "99")])
    agent = signing_agent(contract)
    start = ns(2026, 11, 20)
    batch = records(agent, contract, 96, start)
    batch += records(agent, contract, 4, start + 10**12, status="error")  # 96.0 %: 25 % credit
    batch += records(agent, contract, 3, start + 2 * 10**12, status="rejected")
    for chunk in (batch[:50], batch[50:]):
        response = client.post(
            "/v1/ingest/batches", data=agent.batch(chunk).body(), content_type="application/x-ndjson"
        )
        assert response.status_code == 200, response.content
    generate_invoice(contract.pk, *month_bounds("2026-11"))  # 96 served × 2.00 = 192.00 CNY

    assert close_due_periods_task.delay(AFTER_NOV.isoformat()).get() == 1

    report = SlaReport.objects.get(contract=contract)
    assert (report.record_count, report.rejected_count, report.valid_count) == (103, 3, 100)
    assert [o["measured_percent"] for o in report.objectives] == ["96.0000", "100.0000"]
    credit = ServiceCredit.objects.get(contract=contract)
    assert (credit.fee_basis, credit.amount, credit.report_id) == (
        Decimal("192.00"),
        Decimal("48.00"),
        report.pk,
    )

    # The ledger checkpoint that covers the report's records is filled in once one is published.
    assert report.ledger_checkpoint == ""
    checkpoint = publish_checkpoint("manual")
    assert close_due_periods_task.delay(AFTER_NOV.isoformat()).get() == 1
    report.refresh_from_db()
    root = base64.b64encode(bytes(checkpoint.root_hash)).decode()
    assert (report.ledger_checkpoint, checkpoint.size) == (f"{checkpoint.size} {root}", 103)
    assert report.valid_count == 100 and ServiceCredit.objects.count() == 1


@pytest.mark.django_db
def test_the_beat_job_closes_package_terms_and_skips_contracts_not_yet_started() -> None:
    covered = ContractFactory.create()
    make_policy(package=covered.package)  # terms on the package
    ContractFactory.create(package=covered.package, starts_at=datetime(2026, 12, 1, tzinfo=UTC))  # December
    ContractFactory.create()  # no SLA at all
    settling = datetime(2026, 11, 30, 16, 30, tzinfo=UTC)  # 00:30 on December 1st in Shanghai
    assert close_due_periods_task.delay(settling.isoformat()).get() == 0
    assert close_due_periods_task.delay(AFTER_NOV.isoformat()).get() == 1
    assert list(SlaReport.objects.values_list("contract__code", "month", "status")) == [
        (covered.code, "2026-11", "final")
    ]
