"""The usage endpoints answer exact figures from real ingested records (tests/usage/conftest.py has the
scenario), from the rollups when the period is on their grain and from the raw records otherwise."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from sla.models import Objective, SlaPolicy
from tests.factories import ContractFactory, TenantFactory, signing_agent
from tests.usage.conftest import World, ingest

pytestmark = pytest.mark.django_db

# Tenant A's records span these hours (UTC); tenant B's lie inside them too.
HOURS = {"start": "2026-11-30T22:00:00Z", "end": "2026-12-01T02:00:00Z"}
DAYS = {"start": "2026-11-30", "end": "2026-12-02"}
HOUR_STARTS = [
    "2026-11-30T22:00:00+00:00",
    "2026-11-30T23:00:00+00:00",
    "2026-12-01T00:00:00+00:00",
    "2026-12-01T01:00:00+00:00",
]
DAY_STARTS = ["2026-11-30T00:00:00+00:00", "2026-12-01T00:00:00+00:00"]


def get(client: Client, endpoint: str, **params: Any) -> Any:
    response = client.get(f"/v1/usage/{endpoint}", params)
    assert response.status_code == 200, response.content
    return response


def points(starts: list[str], values: list[str]) -> list[list[str]]:
    return [[start, value] for start, value in zip(starts, values, strict=True)]


def test_hourly_requests_per_package_zero_filled_across_the_month_boundary(world: World) -> None:
    response = get(world.client(world.tenant_a), "timeseries", dimension="requests", interval="hour", **HOURS)
    assert response["X-Usage-Source"] == "rollup"
    assert response.json() == {
        "dimension": "requests",
        "interval": "hour",
        "series": [
            # 23:59:59.999 on 30 November stays in November's last hour; 1 December 00:00 starts the next.
            {"package": "usage-p1", "points": points(HOUR_STARTS, ["3", "1", "2", "0"])},
            {"package": "usage-p2", "points": points(HOUR_STARTS, ["3", "0", "0", "0"])},
        ],
    }


@pytest.mark.parametrize(
    ("dimension", "p1", "p2"),
    [
        ("tokens_in", ["317", "200"], ["160", "0"]),
        ("tokens_out", ["80", "40"], ["30", "0"]),
        ("cached_tokens", ["40", "20"], ["30", "0"]),
        ("expert_tokens", ["1904", "952"], ["556", "0"]),
        ("l3_seconds", ["0.390000", "0.180000"], ["0.210000", "0.000000"]),
    ],
)
def test_daily_totals_of_each_dimension(world: World, dimension: str, p1: list[str], p2: list[str]) -> None:
    body = get(world.client(world.tenant_a), "timeseries", dimension=dimension, interval="day", **DAYS).json()
    assert body["series"] == [
        {"package": "usage-p1", "points": points(DAY_STARTS, p1)},
        {"package": "usage-p2", "points": points(DAY_STARTS, p2)},
    ]


def test_expert_heatmap(world: World) -> None:
    response = get(world.client(world.tenant_a), "experts", **DAYS)
    assert response["X-Usage-Source"] == "rollup"
    # (0,1): 7 default records × 150 + 2 × 10; the error record's experts count too: the hardware ran them.
    assert response.json() == {
        "layers": 3,
        "experts": 8,
        "cells": [[0, 1, 1070], [0, 4, 616], [1, 2, 1666], [2, 7, 60]],
    }


def test_routing_hops_and_cache_hit_rate(world: World) -> None:
    body = get(world.client(world.tenant_a), "routing", interval="hour", **HOURS).json()
    assert body == {
        "points": [
            ["2026-11-30T22:00:00+00:00", "4.333", "0.6667"],  # 26 hops / 6 requests, 12 / 18 hits
            ["2026-11-30T23:00:00+00:00", "5.000", "0.6667"],
            ["2026-12-01T00:00:00+00:00", "5.000", None],  # no expert-cache lookups at all
        ],
        "totals": {"requests": 9, "avg_hops": "4.556", "cache_hit_rate": "0.6667"},
    }


def test_latency_percentiles_of_served_requests_with_the_sla_objectives(world: World) -> None:
    package_policy = SlaPolicy.objects.create(name="P1 terms", package=world.a1.package)
    Objective.objects.create(
        policy=package_policy,
        name="l3-fast",
        kind="latency",
        layer="l3",
        threshold_ms=Decimal("100"),
        target_percent=Decimal("99"),
    )
    Objective.objects.create(
        policy=package_policy, name="up", kind="availability", target_percent=Decimal("99.9")
    )
    own = SlaPolicy.objects.create(name="A2 terms", contract=world.a2)
    Objective.objects.create(
        policy=own,
        name="e2e",
        kind="latency",
        layer="e2e",
        threshold_ms=Decimal("200.5"),
        target_percent=Decimal("95"),
    )
    SlaPolicy.objects.create(name="P2 terms", package=world.a2.package)  # a2's own policy wins

    response = get(world.client(world.tenant_a), "latency", **HOURS)
    assert response["X-Usage-Source"] == "rollup"
    # Served records only (the error record is left out). L3 values: 60 ms × 2, 90 ms × 5, 120 ms × 1;
    # ClickHouse `quantiles` interpolates: p95 = 90 + 0.65 × 30.
    assert response.json() == {
        "layers": {
            "L1": {"p50_ms": "0.500", "p95_ms": "0.500", "p99_ms": "0.500"},
            "L2": {"p50_ms": "3.000", "p95_ms": "3.000", "p99_ms": "3.000"},
            "L3": {"p50_ms": "90.000", "p95_ms": "109.500", "p99_ms": "117.900"},
            "total": {"p50_ms": "150.000", "p95_ms": "169.500", "p99_ms": "177.900"},
        },
        "sla": [
            {
                "policy": "A2 terms",
                "objective": "e2e",
                "layer": "total",
                "threshold_ms": "200.500",
                "target_percent": "95.0000",
                "contracts": ["usage-a2"],
            },
            {
                "policy": "P1 terms",
                "objective": "l3-fast",
                "layer": "L3",
                "threshold_ms": "100.000",
                "target_percent": "99.0000",
                "contracts": ["usage-a1"],
            },
        ],
    }


def test_latency_without_traffic_is_null(world: World) -> None:
    body = get(world.client(world.tenant_a), "latency", start="2026-10-01", end="2026-10-02").json()
    assert body["layers"]["L3"] == {"p50_ms": None, "p95_ms": None, "p99_ms": None}
    assert body["sla"] == []


A1 = {
    "requests": "6",
    "tokens_in": "517",
    "tokens_out": "120",
    "cached_tokens": "60",
    "expert_tokens": "2856",
    "l3_seconds": "0.570000",
    "routing_hops": "30",
    "expert_cache_hits": "8",
    "expert_cache_misses": "4",
}
A2 = {
    "requests": "3",
    "tokens_in": "160",
    "tokens_out": "30",
    "cached_tokens": "30",
    "expert_tokens": "556",
    "l3_seconds": "0.210000",
    "routing_hops": "11",
    "expert_cache_hits": "6",
    "expert_cache_misses": "3",
}


@pytest.mark.parametrize(
    ("by", "rows"),
    [
        ("contract", [{"key": "usage-a1", **A1}, {"key": "usage-a2", **A2}]),
        ("package", [{"key": "usage-p1", **A1}, {"key": "usage-p2", **A2}]),
        (
            "day",
            [
                {
                    "key": "2026-11-30",
                    "requests": "7",
                    "tokens_in": "477",
                    "tokens_out": "110",
                    "cached_tokens": "70",
                    "expert_tokens": "2460",
                    "l3_seconds": "0.600000",
                    "routing_hops": "31",
                    "expert_cache_hits": "14",
                    "expert_cache_misses": "7",
                },
                {
                    "key": "2026-12-01",
                    "requests": "2",
                    "tokens_in": "200",
                    "tokens_out": "40",
                    "cached_tokens": "20",
                    "expert_tokens": "952",
                    "l3_seconds": "0.180000",
                    "routing_hops": "10",
                    "expert_cache_hits": "0",
                    "expert_cache_misses": "0",
                },
            ],
        ),
    ],
)
def test_breakdown_totals_every_dimension(world: World, by: str, rows: list[dict[str, str]]) -> None:
    assert get(world.client(world.tenant_a), "breakdown", by=by, **DAYS).json() == {"by": by, "rows": rows}


def test_contract_and_package_filters(world: World) -> None:
    client = world.client(world.tenant_a)
    by_contract = get(client, "breakdown", by="contract", contract="usage-a2", **DAYS).json()
    assert by_contract["rows"] == [{"key": "usage-a2", **A2}]
    by_package = get(client, "breakdown", by="package", package="usage-p1", **DAYS).json()
    assert by_package["rows"] == [{"key": "usage-p1", **A1}]


def test_a_period_off_the_hour_reads_the_raw_records_of_exactly_that_period(world: World) -> None:
    response = get(
        world.client(world.tenant_a),
        "timeseries",
        dimension="requests",
        interval="hour",
        start="2026-11-30T22:30:00Z",
        end="2026-12-01T00:00:00.000001Z",
    )
    assert response["X-Usage-Source"] == "raw"
    assert response.json()["series"] == [
        {"package": "usage-p1", "points": points(HOUR_STARTS[:3], ["0", "1", "2"])},
        {"package": "usage-p2", "points": points(HOUR_STARTS[:3], ["3", "0", "0"])},
    ]
    experts = get(world.client(world.tenant_a), "experts", **HOURS)  # on the hour, not on the day
    assert experts["X-Usage-Source"] == "raw"
    assert experts.json()["cells"] == [[0, 1, 1070], [0, 4, 616], [1, 2, 1666], [2, 7, 60]]


def test_the_default_period_is_the_last_30_utc_days(world: World) -> None:
    contract = ContractFactory.create(tenant=TenantFactory.create(code="usage-c"), package=world.a1.package)
    agent = signing_agent(contract, agent_id="usage-agent-c")
    now = datetime.now(UTC)
    recent, old = (int((now - timedelta(days=days)).timestamp()) * 10**9 for days in (2, 40))
    ingest(agent, [agent.record(contract, start_ns=recent), agent.record(contract, start_ns=old)])
    response = get(world.client(contract.tenant), "breakdown", by="day")
    assert response["X-Usage-Source"] == "rollup"  # whole UTC days
    day = (now - timedelta(days=2)).date().isoformat()
    assert [(row["key"], row["requests"]) for row in response.json()["rows"]] == [(day, "1")]
