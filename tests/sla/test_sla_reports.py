"""Hand-computed SLA reports from records in the real ClickHouse engine."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from sla.models import SlaReport
from sla.services import SlaError, compute_report
from tests.factories import ContractFactory, signing_agent
from tests.sla.helpers import make_policy, ns, records, store

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
AFTER_NOV = datetime(2026, 12, 2, tzinfo=UTC)


@pytest.mark.parametrize(
    ("failed", "measured", "credit"),
    [
        (0, "100.0000", "0"),
        (1, "99.9000", "0"),  # exactly the objective: no credit
        (2, "99.8000", "10"),
        (10, "99.0000", "10"),  # exactly the second rung: still the first
        (11, "98.9000", "25"),
        (50, "95.0000", "25"),
        (51, "94.9000", "100"),
    ],
)
def test_availability_crosses_every_ladder_step(failed: int, measured: str, credit: str) -> None:
    contract = ContractFactory.create()
    make_policy(contract)
    agent = signing_agent(contract)
    start = ns(2026, 11, 10)
    batch = records(agent, contract, 1000 - failed, start)
    batch += records(agent, contract, failed, start + 10**12, status="error")
    batch += records(agent, contract, 7, start + 2 * 10**12, status="rejected")  # customer 4xx: not valid
    store(batch)

    report = compute_report(contract, "2026-11", now=AFTER_NOV)

    (availability,) = report.objectives
    assert (report.record_count, report.rejected_count, report.valid_count) == (1007, 7, 1000)
    assert (availability["eligible"], availability["good"], availability["bad"]) == (
        1000,
        1000 - failed,
        failed,
    )
    assert availability["measured_percent"] == measured
    assert availability["met"] is (failed <= 1)
    assert report.credit_percent == Decimal(credit)
    assert availability["error_budget"] == "1.0000"  # 0.1 % of 1,000
    assert availability["budget_spent_percent"] == f"{failed * 100}.0000"
    assert report.status == SlaReport.Status.FINAL


def test_per_layer_latency_and_exact_percentiles() -> None:
    contract = ContractFactory.create()
    make_policy(contract, latency=[("l1", "10", "99"), ("l3", "150", "90"), ("e2e", "200", "99.9")])
    agent = signing_agent(contract)
    start = ns(2026, 11, 3)
    batch = []
    for i in range(100):
        l3 = 100_000 if i < 85 else 160_000  # 15 of 100 over L3's 150 ms
        batch.append(
            agent.record(
                contract,
                start_ns=start + i * 10**9,
                end_ns=start + i * 10**9 + (i + 1) * 1_000_000,  # e2e 1..100 ms
                hops=[
                    {"layer": "L1", "node": "r", "latency_us": 1_000 * (i % 20)},  # 0..19 ms: 50 over 10
                    {"layer": "L3", "node": "g", "latency_us": l3},
                ],
            )
        )
    store(batch)

    report = compute_report(contract, "2026-11", now=AFTER_NOV)

    by_name = {o["name"]: o for o in report.objectives}
    assert (by_name["latency-l1"]["good"], by_name["latency-l1"]["measured_percent"]) == (55, "55.0000")
    assert (by_name["latency-l3"]["good"], by_name["latency-l3"]["measured_percent"]) == (85, "85.0000")
    assert (by_name["latency-e2e"]["good"], by_name["latency-e2e"]["met"]) == (100, True)
    assert by_name["latency-l3"]["budget_spent_percent"] == "150.0000"  # 15 bad of a 10-request budget
    # quantileExact picks the element at floor(q·n): e2e values are 1..100 ms.
    assert report.percentiles_ms["e2e"] == {
        "0.5": "51",
        "0.9": "91",
        "0.95": "96",
        "0.99": "100",
        "0.999": "100",
    }
    assert report.percentiles_ms["l3"]["0.9"] == "160"
    assert report.percentiles_ms["l2"]["0.5"] == "0"


def test_latency_counts_only_served_requests_and_failures_count_once() -> None:
    contract = ContractFactory.create()
    make_policy(contract, latency=[("e2e", "200", "99")])
    agent = signing_agent(contract)
    start = ns(2026, 11, 4)
    store(records(agent, contract, 8, start) + records(agent, contract, 2, start + 10**11, status="timeout"))

    report = compute_report(contract, "2026-11", now=AFTER_NOV)

    availability, latency = report.objectives
    assert (availability["eligible"], availability["good"]) == (10, 8)
    assert (latency["eligible"], latency["good"]) == (8, 8)


def test_a_month_of_failures_has_no_percentiles_and_earns_the_top_credit() -> None:
    contract = ContractFactory.create()
    make_policy(contract, latency=[("e2e", "200", "99")])
    agent = signing_agent(contract)
    store(records(agent, contract, 5, ns(2026, 11, 8), status="timeout"))
    report = compute_report(contract, "2026-11", now=AFTER_NOV)
    availability, latency = report.objectives
    assert (availability["measured_percent"], latency["measured_percent"]) == ("0.0000", None)
    assert report.percentiles_ms == {"e2e": {}, "l1": {}, "l2": {}, "l3": {}, "queue": {}}
    assert report.credit_percent == 100
    assert availability["budget_spent_percent"] == "100000.0000"  # 5 bad of a 0.005-request budget


def test_no_traffic_meets_every_objective_and_earns_nothing() -> None:
    contract = ContractFactory.create()
    make_policy(contract)
    report = compute_report(contract, "2026-11", now=AFTER_NOV)
    (availability,) = report.objectives
    assert (availability["measured_percent"], availability["met"], report.credit_percent) == (None, True, 0)
    assert report.percentiles_ms == {"e2e": {}, "l1": {}, "l2": {}, "l3": {}, "queue": {}}
    assert len(report.daily) == 30


def test_duplicate_copies_of_a_record_count_once() -> None:
    contract = ContractFactory.create()
    make_policy(contract)
    agent = signing_agent(contract)
    batch = records(agent, contract, 3, ns(2026, 11, 5), status="error") + records(
        agent, contract, 7, ns(2026, 11, 6)
    )
    store(batch)
    store(batch[:3])  # the failures again, as a re-sent batch would
    report = compute_report(contract, "2026-11", now=AFTER_NOV)
    assert (report.valid_count, report.objectives[0]["good"]) == (10, 7)


def test_open_month_is_provisional_and_recomputed_final_is_not() -> None:
    contract = ContractFactory.create()
    make_policy(contract, time_zone="UTC")
    agent = signing_agent(contract)
    store(records(agent, contract, 4, ns(2026, 11, 5)))
    provisional = compute_report(contract, "2026-11", now=datetime(2026, 11, 20, tzinfo=UTC))
    assert (provisional.status, provisional.valid_count) == ("provisional", 4)

    store(records(agent, contract, 6, ns(2026, 11, 25)))
    final = compute_report(contract, "2026-11", now=AFTER_NOV)
    assert (final.pk, final.status, final.valid_count) == (provisional.pk, "final", 10)

    store(records(agent, contract, 5, ns(2026, 11, 26)))  # late records do not rewrite a final report
    again = compute_report(contract, "2026-11", now=datetime(2026, 12, 9, tzinfo=UTC))
    assert (again.pk, again.valid_count, again.computed_at) == (final.pk, 10, AFTER_NOV)


def test_daily_counts_follow_local_days() -> None:
    contract = ContractFactory.create()
    make_policy(contract)  # Asia/Shanghai, UTC+8
    agent = signing_agent(contract)
    store(
        records(agent, contract, 2, ns(2026, 11, 9, 15, 59))
        + records(agent, contract, 3, ns(2026, 11, 9, 16, 0))
    )
    report = compute_report(contract, "2026-11", now=AFTER_NOV)
    days = {d["day"]: d["objectives"]["availability"]["eligible"] for d in report.daily}
    assert (days["2026-11-09"], days["2026-11-10"], days["2026-11-11"]) == (2, 3, 0)


def test_a_contract_without_sla_terms_is_refused() -> None:
    contract: Any = ContractFactory.create()
    with pytest.raises(SlaError) as raised:
        compute_report(contract, "2026-11", now=AFTER_NOV)
    assert raised.value.code == "no_sla"
