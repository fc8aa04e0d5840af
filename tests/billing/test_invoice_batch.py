"""The batch invoice run (`billing.invoice_run`) makes exactly the invoices `generate_invoice` makes one
contract at a time: a varied set of contracts with real records through ingest, invoiced both ways
from the same database state (the batch run inside a savepoint that is then rolled back), compared
field for field: invoices, lines, wallet entries, late-usage rows and webhook events. Also: a re-run
changes nothing, and concurrent runs give one invoice each with gapless numbers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from agents.models import Agent
from billing import invoice_run
from billing.models import CreditEntry, Invoice, LateUsage
from billing.services import add_coupon, generate_invoice, grant_credits
from billing.tasks import run_invoices
from clickhouse_store import query
from common.periods import month_bounds
from contracts.models import Contract, ContractMetric, ContractPrice
from ingest.models import SequenceGap
from pricing.errors import BillingError
from tests.billing.concurrency import at_once
from tests.billing.usage import at, send
from tests.factories import ContractFactory
from webhooks.models import WebhookEvent

pytestmark = pytest.mark.usefixtures("clickhouse")
D = Decimal
OCT = month_bounds("2026-10")
NOV = month_bounds("2026-11")
DEC_3 = datetime(2026, 12, 3, tzinfo=UTC)  # inside the 5-day grace period
DEC_9 = datetime(2026, 12, 9, tzinfo=UTC)  # after it
TIERS = [{"up_to": 1000, "unit_price": "0.002"}, {"unit_price": "0.001"}]


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(invoice_run, "CHUNK", 4)  # several chunks, fallbacks among them


def price(c: Contract, dimension: str, model: str = "per_unit", **fields: Any) -> None:
    ContractPrice.objects.create(contract=c, dimension=dimension, charge_model=model, **fields)


def varied_contracts() -> list[Contract]:
    """Charge models, quotas, bounds, commitment, tax both ways, grace, custom metric, a price change
    within the month, wallets, late usage, another issuing entity and currency, a coupon (the
    per-contract fallback) and terms that cannot be billed."""
    made = []

    def contract(**terms: Any) -> Contract:
        made.append(ContractFactory.create(**terms))
        return made[-1]

    c = contract(base_fee=D("100"), tax_rate=D("0.06"))
    price(c, "requests", unit_price=D("0.05"))
    price(c, "tokens_out", unit_price=D("0.00006"))
    send(c, 12, at(2026, 11, 3), tokens_out=700)
    agent = Agent.objects.get(agent_id=f"agent-{c.code}")
    SequenceGap.objects.create(agent=agent, first_missing=5, last_missing=6)  # open: stated on the invoice
    SequenceGap.objects.create(agent=agent, first_missing=8, last_missing=8, closed_at=DEC_3)

    c = contract(minimum_commitment=D("50"), tax_rate=D("0.13"), tax_inclusive=True)
    price(c, "tokens_in", "graduated", properties={"tiers": TIERS}, included_quantity=D("500"))
    price(c, "tokens_out", "volume", properties={"tiers": TIERS, "minimum": "1"})
    price(c, "requests", "package", properties={"package_size": "5", "package_price": "0.3"})
    send(c, 9, at(2026, 11, 7), tokens_in=333, tokens_out=121)

    c = contract(base_fee=D("30"), base_fee_timing="advance", grace_days=5)
    price(c, "requests", unit_price=D("0.5"), included_quantity=D("3"))
    send(c, 7, at(2026, 11, 12))

    c = contract(grace_days=1, issuing_entity="treemeter-hk", currency="JPY", tax_rate=D("0.1"))
    price(c, "tokens_out", unit_price=D("0.03"), properties={"maximum": "40"})
    price(c, "requests", unit_price=D("1"))
    send(c, 11, at(2026, 11, 20), tokens_out=250)

    c = contract(base_fee=D("10"))
    ContractMetric.objects.create(
        contract=c, code="weighted", name="Weighted", expression="distinct_experts * hops + tokens_out / 7"
    )
    price(c, "weighted", unit_price=D("0.013"))
    send(c, 6, at(2026, 11, 9), tokens_out=90)

    c = contract(tax_rate=D("0.06"))
    price(c, "requests", unit_price=D("0.01"))
    price(c, "tokens_out", unit_price=D("0.00003"), included_quantity=D("1000"))
    price(c, "tokens_out", unit_price=D("0.00002"), effective_from=datetime(2026, 11, 15, tzinfo=UTC))
    send(c, 10, at(2026, 11, 3), tokens_out=100_000)
    send(c, 5, at(2026, 11, 20), tokens_out=200_000)

    c = contract(base_fee=D("40"), tax_rate=D("0.06"))  # the wallet pays all it can
    price(c, "requests", unit_price=D("0.5"))
    grant_credits(c, D("25.00"), reference="g1")
    send(c, 4, at(2026, 11, 4))

    c = contract(base_fee=D("40"), tax_rate=D("0.06"), credit_order=["usage"])  # only usage lines
    price(c, "requests", unit_price=D("0.5"))
    grant_credits(c, D("100.00"), reference="g2")
    send(c, 4, at(2026, 11, 4))

    c = contract(base_fee=D("5"))  # October was invoiced; late October records come in November
    price(c, "requests", unit_price=D("0.2"))
    send(c, 3, at(2026, 10, 10))
    generate_invoice(c.pk, *OCT, now=datetime(2026, 11, 2, tzinfo=UTC))
    send(c, 2, at(2026, 10, 11))
    send(c, 8, at(2026, 11, 11))

    c = contract(base_fee=D("20"))  # a coupon: the per-contract path inside the run
    price(c, "requests", unit_price=D("0.1"))
    add_coupon(c, "WELCOME", percent_off=D("0.1"), periods=3)
    send(c, 5, at(2026, 11, 5))

    c = contract(base_fee=D("8"))  # no records at all
    price(c, "requests", unit_price=D("0.1"))

    c = contract()  # terms that cannot be billed
    price(c, "tokens_in", "graduated", properties={"tiers": []})
    send(c, 2, at(2026, 11, 5))
    return made


def snapshot(contracts: list[Contract]) -> dict[str, Any]:
    """Everything the invoices of the contracts consist of, keyed by contract (never by row id)."""
    code = {c.pk: c.code for c in contracts}
    invoices = Invoice.objects.filter(contract__in=contracts).order_by("contract_id", "period_start")
    by_pk = {i.pk: f"{code[i.contract_id]}/{i.period_start:%Y-%m}" for i in invoices}
    skip = {"id", "created_at", "number"}
    return {
        "invoices": {
            by_pk[i.pk]: {
                **{
                    f.attname: getattr(i, f.attname)
                    for f in Invoice._meta.concrete_fields
                    if f.name not in skip
                },
                "lines": [
                    (x.kind, x.dimension, x.description, x.quantity, x.unit_price, x.amount, x.details)
                    for x in i.lines.order_by("id")
                ],
            }
            for i in invoices
        },
        "numbers": sorted(str(i.number) for i in invoices),
        "wallet": sorted(
            (
                code[e.contract_id],
                e.kind,
                e.amount,
                by_pk.get(e.invoice_id or 0, ""),
                e.reference.split(":")[0],
            )
            for e in CreditEntry.objects.filter(contract__in=contracts)
        ),
        "late": sorted(
            (
                by_pk[u.invoice_id],
                u.dimension,
                u.quantity,
                u.amount,
                u.decision,
                by_pk.get(u.billed_on_id or 0, ""),
            )
            for u in LateUsage.objects.filter(invoice__in=invoices)
        ),
        "events": sorted(
            (
                e.type,
                by_pk[e.payload["invoice"]],
                {k: v for k, v in e.payload.items() if k not in ("invoice", "number")},
            )
            for e in WebhookEvent.objects.filter(type__startswith="invoice.")
        ),
    }


class _Undo(Exception):
    pass


def rolled_back(work: Any) -> Any:
    """What `work` returns, run in a savepoint that is then rolled back: it leaves nothing behind."""
    result = []
    try:
        with transaction.atomic():
            result.append(work())
            raise _Undo
    except _Undo:
        return result[0]


def one_by_one(contracts: list[Contract], now: datetime) -> dict[str, str]:
    failed = {}
    for c in sorted(contracts, key=lambda c: c.pk):
        try:
            generate_invoice(c.pk, *NOV, now=now)
        except BillingError as error:
            failed[c.code] = f"{error.code}: {error.message}"
    return failed


@pytest.mark.django_db
def test_the_batch_run_makes_the_invoices_generate_invoice_makes() -> None:
    contracts = varied_contracts()
    [coupon, empty, unbillable] = contracts[-3:]

    def batch() -> tuple[Any, ...]:
        first = run_invoices("2026-11", now=DEC_3)
        during_grace = snapshot(contracts)
        second = run_invoices("2026-11", now=DEC_9)  # re-rates the grace draft, then finalises it
        return first, during_grace, second, snapshot(contracts)

    first, during_grace, second, after = rolled_back(batch)

    expected_failed = one_by_one(contracts, DEC_3)
    assert first == {"contracts": 12, "finalized": 10, "failed": expected_failed}
    assert list(expected_failed) == [unbillable.code]
    assert expected_failed[unbillable.code].startswith("missing_property: ")
    assert during_grace == snapshot(contracts)
    assert during_grace["numbers"] == (  # October's first, and the grace draft without one
        ["None"] + [f"TREEMETER-{n:06d}" for n in range(1, 11)] + ["TREEMETER-HK-000001"]
    )

    one_by_one(contracts, DEC_9)
    assert second == {"contracts": 12, "finalized": 11, "failed": expected_failed}
    assert after == snapshot(contracts)
    assert len(after["numbers"]) == 12  # October's, and November's for all but the unbillable one

    invoices = after["invoices"]
    completeness = invoices[f"{contracts[0].code}/2026-11"]["terms"]["completeness"]
    assert completeness == {
        "records": 12,
        "logged_records": 12,
        "excluded_records": 0,
        "gaps": [{"agent_id": f"agent-{contracts[0].code}", "first_seq": 5, "last_seq": 6}],
        "complete": False,
    }
    late = invoices[f"{contracts[8].code}/2026-11"]["lines"]
    assert [(k, q, a) for k, _, _, q, _, a, _ in late] == [
        ("usage", D(8), D("1.60")),  # 8 × 0.2
        ("adjustment", D(2), D("0.40")),  # October's 2 late records
        ("base_fee", D(1), D("5.00")),
    ]
    assert invoices[f"{coupon.code}/2026-11"]["lines"][-1][0] == "discount"
    assert invoices[f"{empty.code}/2026-11"]["total"] == D("8.00")
    wallet = [w for w in after["wallet"] if w[1] == "consume"]
    assert [(w[0], w[2]) for w in wallet] == [
        (contracts[6].code, D("-25.00")),
        (contracts[7].code, D("-2.12")),
    ]


@pytest.mark.django_db
def test_running_again_changes_nothing() -> None:
    contracts = varied_contracts()
    assert run_invoices("2026-11", now=DEC_9)["finalized"] == 11
    before = snapshot(contracts)
    ids = sorted(Invoice.objects.values_list("id", "number"))
    seen: list[tuple[int, int]] = []

    again = run_invoices("2026-11", lambda done, total: seen.append((done, total)), now=DEC_9)

    assert again["finalized"] == 11 and list(again["failed"]) == [contracts[-1].code]
    assert snapshot(contracts) == before
    assert sorted(Invoice.objects.values_list("id", "number")) == ids
    assert seen == [(n, 12) for n in range(1, 13)]


@pytest.mark.django_db
def test_an_open_period_fails_every_contract_and_writes_nothing() -> None:
    contracts = varied_contracts()[:2]
    result = run_invoices("2026-11", now=datetime(2026, 11, 30, tzinfo=UTC))
    message = "period_open: The period ending 2026-12-01T00:00:00+00:00 has not closed yet."
    assert result["failed"] == {c.code: message for c in Contract.objects.billable()}
    assert not Invoice.objects.filter(contract__in=contracts, period_start=NOV[0]).exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_batch_runs_make_one_invoice_each_with_gapless_numbers() -> None:
    contracts = []
    for k in range(11):
        c = ContractFactory.create(
            base_fee=D("3"), issuing_entity="treemeter-hk" if k % 3 == 0 else "treemeter"
        )
        price(c, "requests", unit_price=D("0.5"))
        if k % 4 == 0:
            add_coupon(c, f"C{k}", amount_off=D("1"))  # the per-contract path, under the same locks
        send(c, k + 1, at(2026, 11, 3))
        contracts.append(c)
    results = at_once(lambda: run_invoices("2026-11", now=DEC_9), threads=3)

    assert results == [{"contracts": 11, "finalized": 11, "failed": {}}] * 3
    invoices = Invoice.objects.filter(contract__in=contracts)
    assert invoices.count() == 11
    assert sorted(str(n) for n in invoices.values_list("number", flat=True)) == sorted(
        [f"TREEMETER-{n:06d}" for n in range(1, 8)] + [f"TREEMETER-HK-{n:06d}" for n in range(1, 5)]
    )
    assert sorted(invoices.values_list("total", flat=True)) == sorted(
        D(3) + D("0.5") * (k + 1) - (1 if k % 4 == 0 else 0) for k in range(11)
    )


@pytest.mark.django_db
def test_the_batch_path_takes_the_same_statements_for_more_contracts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk's statements do not grow with its contracts (webhook events included: one insert)."""
    monkeypatch.setattr(invoice_run, "CHUNK", 250)

    def statements(month: str, count: int) -> int:
        for k in range(count):
            start, end = month_bounds(month)
            c = ContractFactory.create(base_fee=D("3"), tax_rate=D("0.06"), starts_at=start, ends_at=end)
            price(c, "requests", unit_price=D("0.5"))
            price(c, "tokens_in", "graduated", properties={"tiers": TIERS}, included_quantity=D("10"))
            send(c, k + 1, at(2026, int(month[-2:]), 3))
        with CaptureQueriesContext(connection) as captured:
            result = run_invoices(month, now=DEC_9)
        assert result["finalized"] == count
        return sum("SAVEPOINT" not in q["sql"] for q in captured.captured_queries)

    statements("2026-09", 1)  # makes the sequence row
    assert statements("2026-10", 3) == statements("2026-11", 9) <= 30


@pytest.mark.django_db
def test_late_usage_is_measured_once_per_earlier_period_not_per_contract(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Late records of the month before reach every contract's next invoice, from ClickHouse queries
    and PostgreSQL statements whose numbers do not grow with the contracts."""
    monkeypatch.setattr(invoice_run, "CHUNK", 250)
    asked: list[str] = []
    select = query.select

    def counted(sql: str, params: Any = None) -> Any:
        asked.append(sql)
        return select(sql, params)

    monkeypatch.setattr(query, "select", counted)

    def queries(first: str, second: str, count: int) -> tuple[int, int]:
        (start, _), (_, end) = month_bounds(first), month_bounds(second)
        contracts = []
        for _ in range(count):
            c = ContractFactory.create(base_fee=D("3"), starts_at=start, ends_at=end)
            price(c, "requests", unit_price=D("0.5"))
            send(c, 2, start_ns(start, day=5))
            contracts.append(c)
        assert run_invoices(first, now=start + timedelta(days=40))["finalized"] == count
        for c in contracts:
            send(c, 1, start_ns(start, day=20))  # late: its invoice is final
            send(c, 4, start_ns(month_bounds(second)[0], day=3))
        asked.clear()
        with CaptureQueriesContext(connection) as captured:
            assert run_invoices(second, now=end + timedelta(days=8))["finalized"] == count
        for c in contracts:
            invoice = Invoice.objects.get(contract=c, period_start=month_bounds(second)[0])
            assert [
                (line.kind, line.quantity, line.amount) for line in invoice.lines.filter(kind="adjustment")
            ] == [("adjustment", D("1"), D("0.50"))]
        billed_on = LateUsage.objects.filter(invoice__contract__in=contracts).values_list(
            "billed_on__period_start"
        )
        assert list(billed_on) == [(month_bounds(second)[0],)] * count  # one priced dimension each
        return len(asked), sum("SAVEPOINT" not in q["sql"] for q in captured.captured_queries)

    few, more = queries("2026-07", "2026-08", 2), queries("2026-09", "2026-10", 6)
    assert few == more
    assert few[0] <= 4


def start_ns(month_start: datetime, *, day: int) -> int:
    return at(month_start.year, month_start.month, day)
