"""The invoice job on real PostgreSQL and the real ClickHouse engine."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client

from billing.models import Invoice
from billing.services import BillingError, generate_invoice
from billing.tasks import generate_invoice_task
from clickhouse_store import query
from common.periods import month_bounds
from tests.factories import ContractFactory, ContractPriceFactory, SigningAgent, signing_agent

pytestmark = pytest.mark.usefixtures("clickhouse")
NOV = month_bounds("2026-11")


def priced_contract() -> Any:
    contract = ContractFactory()
    ContractPriceFactory(contract=contract, dimension="requests", unit_price=Decimal("0.05"))
    ContractPriceFactory(contract=contract, dimension="tokens_in", unit_price=Decimal("0.0002"))
    ContractPriceFactory(contract=contract, dimension="expert_tokens", unit_price=Decimal("0.00001"))
    ContractPriceFactory(contract=contract, dimension="l3_seconds", unit_price=Decimal("0.80"))
    return contract


def send(client: Client, agent: SigningAgent, records: list[dict[str, Any]]) -> None:
    response = client.post(
        "/v1/ingest/batches", data=agent.batch(records).body(), content_type="application/x-ndjson"
    )
    assert response.status_code == 200, response.content


def in_month(day: int) -> int:
    return int(datetime(2026, 11, day, tzinfo=UTC).timestamp()) * 10**9


@pytest.mark.django_db
def test_invoice_lines_are_quantity_times_price_over_the_period(client: Client) -> None:
    contract = priced_contract()
    agent = signing_agent(contract)
    records = [agent.record(contract, start_ns=in_month(1 + i)) for i in range(7)]
    records.append(agent.record(contract, start_ns=in_month(2), status="error"))  # not billable
    records.append(agent.record(contract, start_ns=int(NOV[1].timestamp()) * 10**9))  # December: next period
    send(client, agent, records)

    invoice = generate_invoice(contract.pk, *NOV)

    lines = {line.dimension: (line.quantity, line.unit_price, line.amount) for line in invoice.lines.all()}
    assert lines == {
        "requests": (Decimal(7), Decimal("0.05"), Decimal("0.35")),
        "tokens_in": (Decimal(700), Decimal("0.0002"), Decimal("0.14")),
        "expert_tokens": (Decimal(7 * 476), Decimal("0.00001"), Decimal("0.03")),  # 0.03332
        "l3_seconds": (Decimal("0.63"), Decimal("0.80"), Decimal("0.50")),  # 7 × 90,000 µs; 0.504
    }
    assert invoice.total == Decimal("1.02")
    assert invoice.record_count == 8
    assert invoice.currency == "CNY"


@pytest.mark.django_db
def test_running_the_job_twice_yields_one_invoice() -> None:
    contract = priced_contract()
    first = generate_invoice_task.delay(contract.code, "2026-11").get()
    second = generate_invoice_task.delay(contract.code, "2026-11").get()
    assert first == second
    assert Invoice.objects.filter(contract=contract).count() == 1


@pytest.mark.django_db(transaction=True)
def test_running_the_job_twice_at_the_same_time_yields_one_invoice() -> None:
    contract = priced_contract()
    results: list[int] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        barrier.wait()
        try:
            results.append(generate_invoice(contract.pk, *NOV).pk)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and len(set(results)) == 1
    assert Invoice.objects.filter(contract=contract).count() == 1


@pytest.mark.django_db
def test_an_open_period_is_not_invoiced() -> None:
    contract = priced_contract()
    with pytest.raises(BillingError) as raised:
        generate_invoice(contract.pk, datetime(2099, 1, 1, tzinfo=UTC), datetime(2099, 2, 1, tzinfo=UTC))
    assert raised.value.code == "period_open"


@pytest.mark.django_db(transaction=True)
def test_concurrent_replays_change_neither_stored_counts_nor_invoice_amounts(live_server: Any) -> None:
    """Each batch is replayed 3 times concurrently over HTTP; the store and the invoice stay as before."""
    from treemeter_records import IngestClient

    contract = priced_contract()
    agent = signing_agent(contract)
    batches = [
        agent.batch([agent.record(contract, start_ns=in_month(3)) for _ in range(50)]) for _ in range(4)
    ]
    client = IngestClient(live_server.url)
    for batch in batches:
        client.send(batch)
    counted = query.select(f"SELECT count(), sum(tokens_in) FROM {query.RECORDS}")[0]
    answers: list[Any] = []

    def replay(batch: Any) -> None:
        answers.append(IngestClient(live_server.url).send(batch))

    threads = [threading.Thread(target=replay, args=(batch,)) for batch in batches for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(answers) == 12 and all(
        (a.accepted, a.duplicate) == (50, 0) for a in answers
    )  # the first answer
    assert query.select(f"SELECT count(), sum(tokens_in) FROM {query.RECORDS}")[0] == counted == (200, 20_000)
    assert query.select("SELECT count() FROM usage_records")[0][0] == 200  # no second copy even before merges
    invoice = generate_invoice(contract.pk, *NOV)
    assert {line.dimension: line.amount for line in invoice.lines.all()}["requests"] == Decimal("10.00")
    assert invoice.total == Decimal("10.00") + Decimal("4.00") + Decimal("0.95") + Decimal("14.40")


@pytest.mark.django_db
def test_print_invoice_command_shows_the_lines(capsys: Any) -> None:
    contract = priced_contract()
    invoice = generate_invoice(contract.pk, *NOV)
    call_command("print_invoice", str(invoice.pk))
    out = capsys.readouterr().out
    assert f"Invoice #{invoice.pk}" in out and "Requests" in out and "0.00" in out


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_celery_worker_writes_the_invoice(client: Client, redis_url: str) -> None:
    from tests.worker import celery_worker

    contract = priced_contract()
    agent = signing_agent(contract)
    send(client, agent, [agent.record(contract, start_ns=in_month(5)) for _ in range(3)])
    with celery_worker(redis_url) as worker:
        invoice_id = worker.app.send_task(
            "billing.generate_invoice", args=[contract.code, "2026-11"], queue=worker.queue
        ).get(timeout=90)
    invoice = Invoice.objects.get(pk=invoice_id)  # written by the worker process, read here
    assert invoice.contract_id == contract.pk
    assert {line.dimension: line.amount for line in invoice.lines.all()} == {
        "requests": Decimal("0.15"),
        "tokens_in": Decimal("0.06"),
        "expert_tokens": Decimal("0.01"),  # 1,428 × 0.00001 = 0.01428
        "l3_seconds": Decimal("0.22"),  # 0.27 s × 0.80 = 0.216
    }


@pytest.mark.django_db
def test_a_contract_of_base_fee_only_is_invoiced_its_fee() -> None:
    contract: Any = ContractFactory(currency="CNY", base_fee=Decimal("99.00"))  # no usage prices at all

    invoice = generate_invoice(contract.pk, *NOV, now=datetime(2026, 12, 2, tzinfo=UTC))

    assert (invoice.status, invoice.total, invoice.amount_due) == (
        "finalized",
        Decimal("99.00"),
        Decimal("99.00"),
    )
