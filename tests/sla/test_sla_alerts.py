"""Burn-rate alerts on crafted traffic: they fire, deduplicate and resolve; one slow request pages no one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sla.alerts import evaluate_burn_rates
from sla.models import AlertEvent, SlaAlert
from sla.tasks import evaluate_burn_rates_task
from tests.factories import ContractFactory, signing_agent
from tests.sla.helpers import make_policy, records, store

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)
MINUTE = 60 * 10**9


def at(instant: datetime) -> int:
    return int(instant.timestamp()) * 10**9


def open_rules() -> set[str]:
    return set(SlaAlert.objects.filter(resolved_at__isnull=True).values_list("rule", flat=True))


def test_an_outage_fires_every_rule_once_and_each_resolves_when_its_short_window_clears() -> None:
    contract = ContractFactory.create()
    make_policy(contract)  # availability 99.9 %: the budget is 0.1 % of requests
    agent = signing_agent(contract)
    # One request a minute for three days; the last hour fails (60 errors).
    start = NOW - timedelta(days=3)
    store(records(agent, contract, 3 * 1440 - 60, at(start), MINUTE))
    store(records(agent, contract, 60, at(NOW - timedelta(hours=1)), MINUTE, status="error"))

    assert evaluate_burn_rates_task.delay(NOW.isoformat()).get() == 4
    assert open_rules() == {"page-1h", "page-6h", "ticket-1d", "ticket-3d"}
    page = SlaAlert.objects.get(rule="page-1h")
    assert (
        page.severity,
        page.subject,
        page.measured["long_burn_rate"],
        page.measured["short_burn_rate"],
    ) == (
        "page",
        "availability",
        "1000.0000",
        "1000.0000",  # 100 % bad ÷ 0.1 %
    )
    ticket = SlaAlert.objects.get(rule="ticket-3d")
    assert ticket.measured["long_burn_rate"] == "13.8889"  # 60 / 4,320 ÷ 0.001

    assert evaluate_burn_rates(contract, now=NOW + timedelta(seconds=30)) == 4  # still failing: no new alerts
    assert SlaAlert.objects.count() == AlertEvent.objects.count() == 4
    assert set(SlaAlert.objects.values_list("last_evaluated_at", flat=True)) == {NOW + timedelta(seconds=30)}

    # Served again: ten good minutes clear the 5-minute window only.
    store(records(agent, contract, 10, at(NOW), MINUTE))
    assert evaluate_burn_rates(contract, now=NOW + timedelta(minutes=10)) == 3
    assert open_rules() == {"page-6h", "ticket-1d", "ticket-3d"}
    resolved = AlertEvent.objects.get(kind="resolved")
    assert resolved.payload["rule"] == "page-1h" and resolved.payload["type"] == "sla.alert.resolved"

    # Six good hours clear every short window.
    store(records(agent, contract, 350, at(NOW + timedelta(minutes=10)), MINUTE))
    assert evaluate_burn_rates(contract, now=NOW + timedelta(hours=6)) == 0
    assert open_rules() == set()
    assert AlertEvent.objects.filter(kind="resolved").count() == 4
    assert SlaAlert.objects.count() == 4


def test_one_slow_request_does_not_fire() -> None:
    contract = ContractFactory.create()
    make_policy(contract, availability=None, latency=[("e2e", "200", "99.9")])
    agent = signing_agent(contract)
    start = NOW - timedelta(hours=6)
    store(records(agent, contract, 6 * 360 - 1, at(start), 10**10))  # one request every 10 s
    slow = agent.record(contract, start_ns=at(NOW - timedelta(minutes=1)))
    slow["end_ns"] = slow["start_ns"] + 5 * 10**9  # 5 s: far over 200 ms
    store([slow])
    assert evaluate_burn_rates(contract, now=NOW) == 0
    assert SlaAlert.objects.count() == 0


def test_a_slow_layer_burns_its_latency_budget() -> None:
    contract = ContractFactory.create()
    make_policy(contract, availability=None, latency=[("l3", "150", "99")])
    agent = signing_agent(contract)
    slow_l3 = [{"layer": "L3", "node": "gpu-1", "latency_us": 400_000}]
    store(records(agent, contract, 120, at(NOW - timedelta(hours=1)), 30 * 10**9, hops=slow_l3))
    # Every request of the last hour is slow on L3: 100 × the 1 % budget.
    assert open_rules() == set()
    assert evaluate_burn_rates(contract, now=NOW) == 4
    assert set(SlaAlert.objects.values_list("objective__name", flat=True)) == {"latency-l3"}


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_celery_worker_runs_the_beat_job(redis_url: str) -> None:
    from tests.worker import celery_worker

    contract = ContractFactory.create()
    make_policy(contract)
    agent = signing_agent(contract)
    store(
        records(agent, contract, 120, at(NOW - timedelta(hours=1)), 30 * 10**9, status="timeout")
    )  # the last hour
    with celery_worker(redis_url) as worker:
        opened = worker.app.send_task(
            "sla.evaluate_burn_rates", args=[NOW.isoformat()], queue=worker.queue
        ).get(timeout=90)
    assert opened == 4
    assert AlertEvent.objects.filter(kind="fired").count() == 4  # written by the worker, read here


def test_alerts_api_shows_only_the_callers_tenant(django_user_model: Any) -> None:
    from django.test import Client

    from accounts.models import Membership

    mine, theirs = ContractFactory.create(), ContractFactory.create()
    for contract in (mine, theirs):
        make_policy(contract)
        agent = signing_agent(contract, agent_id=f"agent-{contract.code}")
        store(records(agent, contract, 60, at(NOW - timedelta(hours=1)), MINUTE, status="error"))
        evaluate_burn_rates(contract, now=NOW)
    user = django_user_model.objects.create_user("alice", password="pw")
    Membership.objects.create(user=user, tenant=mine.tenant)
    client = Client()
    client.force_login(user)

    listed = client.get("/v1/sla/alerts", {"open": "true"}).json()["results"]

    assert {(a["contract"], a["rule"]) for a in listed} == {
        (mine.code, rule) for rule in ("page-1h", "page-6h", "ticket-1d", "ticket-3d")
    }
    assert listed[0]["measured"]["long_burn_rate"] == "1000.0000"


def test_one_policy_evaluates_its_contracts_together_each_with_its_own_exclusions(staff: Any) -> None:
    from sla.services import declare_exclusion

    failing = ContractFactory.create()
    excused = ContractFactory.create(package=failing.package)
    healthy = ContractFactory.create(package=failing.package)
    make_policy(package=failing.package)
    for contract in (failing, excused, healthy):
        agent = signing_agent(contract, agent_id=f"agent-{contract.code}")
        status = "ok" if contract == healthy else "error"
        store(records(agent, contract, 60, at(NOW - timedelta(hours=1)), MINUTE, status=status))
    declare_exclusion(
        excused,
        kind="customer_dependency",
        scope="failed",
        starts_at=NOW - timedelta(hours=2),
        ends_at=NOW,
        reason="Customer HIS answered 503",
        declared_by=staff,
    )

    assert evaluate_burn_rates_task.delay(NOW.isoformat()).get() == 4
    assert set(SlaAlert.objects.values_list("contract__code", flat=True)) == {failing.code}
