"""Route-jitter and expert-health signals on crafted traffic, through the same alerts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from sla.health import evaluate_health, expert_hit_rates, expert_use, route_jitter_ms
from sla.models import AlertEvent, SlaAlert
from tests.factories import ContractFactory, signing_agent
from tests.sla.helpers import make_policy, store

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)


def at(instant: datetime) -> int:
    return int(instant.timestamp()) * 10**9


def test_p95_spread_over_50_ms_fires_and_steady_latency_resolves() -> None:
    contract = ContractFactory.create()
    make_policy(contract)
    agent = signing_agent(contract)
    batch = []
    for bucket in range(12):  # 5-minute buckets of the last hour, 10 requests each
        latency_ms = 100 if bucket % 2 else 250
        for i in range(10):
            start = at(NOW - timedelta(hours=1) + timedelta(minutes=5 * bucket, seconds=20 * i))
            batch.append(agent.record(contract, start_ns=start, end_ns=start + latency_ms * 10**6))
    store(batch)

    assert route_jitter_ms([contract], NOW) == {
        contract.code: (12, Decimal("75.000"))
    }  # P95s of 100 and 250 ms
    assert evaluate_health([contract], now=NOW) == {contract.code: 1}
    alert = SlaAlert.objects.get()
    assert (alert.kind, alert.rule, alert.subject, alert.measured["p95_stddev_ms"]) == (
        "route_jitter",
        "route-jitter",
        "e2e",
        "75.000",
    )

    steady = []
    for minute in range(60):
        start = at(NOW + timedelta(minutes=minute))
        steady.append(agent.record(contract, start_ns=start, end_ns=start + 150 * 10**6))
    store(steady)
    later = NOW + timedelta(hours=1)
    assert route_jitter_ms([contract], later) == {contract.code: (12, Decimal("0.000"))}
    assert evaluate_health([contract], now=later) == {contract.code: 0}
    alert.refresh_from_db()
    assert alert.resolved_at == later
    assert list(AlertEvent.objects.values_list("kind", flat=True)) == ["fired", "resolved"]


def test_an_expert_that_stops_being_routed_to_is_flagged_until_it_returns() -> None:
    contract = ContractFactory.create()
    make_policy(contract)
    agent = signing_agent(contract)
    # Baseline: the default records route layer 0 to experts 1 and 4, layer 1 to expert 2.
    store([agent.record(contract, start_ns=at(NOW - timedelta(hours=5, minutes=i))) for i in range(10)])
    without_4 = [{"layer": 0, "expert": 1, "tokens": 30}, {"layer": 1, "expert": 2, "tokens": 10}]
    store(
        [
            agent.record(contract, start_ns=at(NOW - timedelta(minutes=10 + i)), experts=without_4)
            for i in range(3)
        ]
    )

    uses = expert_use([contract], NOW)[contract.code]
    assert [(u.layer, u.expert, u.baseline_tokens, u.recent_tokens) for u in uses] == [
        (0, 1, 1500, 90),
        (0, 4, 880, 0),
        (1, 2, 2380, 30),
    ]
    assert expert_hit_rates(uses) == {
        0: {1: Decimal("1.0000"), 4: Decimal("0.0000")},
        1: {2: Decimal("1.0000")},
    }
    assert evaluate_health([contract], now=NOW) == {contract.code: 1}
    assert SlaAlert.objects.get().subject == "layer 0 expert 4"
    assert evaluate_health([contract], now=NOW + timedelta(seconds=30)) == {contract.code: 1}  # no duplicate
    assert SlaAlert.objects.count() == 1

    store([agent.record(contract, start_ns=at(NOW + timedelta(minutes=1)))])  # expert 4 routed again
    assert evaluate_health([contract], now=NOW + timedelta(minutes=2)) == {contract.code: 0}
    assert SlaAlert.objects.get().resolved_at == NOW + timedelta(minutes=2)
