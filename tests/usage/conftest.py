"""A usage scenario with exact figures: two tenants, three contracts on two packages, real signed
batches through POST /v1/ingest/batches, and empty rollups before each test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import Membership, Tenant
from clickhouse_store import query
from clickhouse_store.schema import ROLLUP_TABLES
from contracts.models import Contract
from tests.factories import ComputePackageFactory, ContractFactory, SigningAgent, TenantFactory, signing_agent


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, ms: int = 0) -> int:
    """A record start time in ns (UTC)."""
    instant = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    return int(instant.timestamp()) * 10**9 + ms * 10**6


@pytest.fixture
def rollups(clickhouse: None) -> Iterator[None]:
    """ClickHouse with no usage records and empty rollups (the session fixture truncates the records only)."""
    for table in ROLLUP_TABLES:
        query.command(f"TRUNCATE TABLE {table}")
    yield


def ingest(agent: SigningAgent, records: list[dict[str, Any]]) -> dict[str, Any]:
    """POST one signed batch of `records`; the ingest answer."""
    response = Client().post(
        "/v1/ingest/batches", data=agent.batch(records).body(), content_type="application/x-ndjson"
    )
    assert response.status_code == 200, response.content
    return response.json()


@dataclass
class World:
    tenant_a: Tenant
    tenant_b: Tenant
    a1: Contract  # tenant A, package usage-p1
    a2: Contract  # tenant A, package usage-p2
    b1: Contract  # tenant B, package usage-p1
    agent: SigningAgent

    def client(self, tenant: Tenant | None) -> Client:
        """A signed-in member of `tenant` (owner), or platform staff for None."""
        name = f"user-{tenant.code if tenant else 'staff'}-{uuid.uuid4().hex[:8]}"
        user = get_user_model().objects.create_user(name, is_staff=tenant is None)
        if tenant is not None:
            Membership.objects.create(user=user, tenant=tenant)
        client = Client()
        client.force_login(user)
        return client


# a2's served records: three hops, two experts, 80 ms end to end.
A2_HOPS = [
    {"layer": "L1", "node": "router-1", "latency_us": 200},
    {"layer": "L3", "node": "gpu-1", "latency_us": 60_000},
    {"layer": "L1", "node": "router-1", "latency_us": 100},
]
A2_EXPERTS = [{"layer": 0, "expert": 1, "tokens": 10}, {"layer": 2, "expert": 7, "tokens": 30}]
SLOW_HOPS = [
    {"layer": "L1", "node": "router-1", "latency_us": 400},
    {"layer": "L2", "node": "cache-1", "latency_us": 2_000},
    {"layer": "L3", "node": "gpu-1", "latency_us": 120_000},
    {"layer": "L2", "node": "cache-1", "latency_us": 1_000},
    {"layer": "L1", "node": "router-1", "latency_us": 100},
]


def scenario_records(world: World) -> list[dict[str, Any]]:
    """The records of the scenario. Defaults of SigningAgent.record: tokens 100 in / 20 out, 10 cached,
    experts (0,1,150) (0,4,88) (1,2,238), five hops (L1 500 µs, L2 3000 µs, L3 90000 µs), 150 ms end to
    end, expert cache 2 hits / 1 miss, status ok."""
    agent, a1, a2, b1 = world.agent, world.a1, world.a2, world.b1
    records = [agent.record(a1, start_ns=at(2026, 11, 30, 22, 10)) for _ in range(3)]
    late = at(2026, 11, 30, 23, 59, 59, 999)
    records.append(agent.record(a1, start_ns=late, end_ns=late + 180_000_000, tokens_in=17, hops=SLOW_HOPS))
    records += [
        agent.record(a1, start_ns=at(2026, 12, 1), expert_cache_hits=0, expert_cache_misses=0)
        for _ in range(2)
    ]
    a2_start = at(2026, 11, 30, 22, 40)
    records += [
        agent.record(
            a2,
            start_ns=a2_start,
            end_ns=a2_start + 80_000_000,
            tokens_in=30,
            tokens_out=5,
            hops=A2_HOPS,
            experts=A2_EXPERTS,
        )
        for _ in range(2)
    ]
    records.append(agent.record(a2, start_ns=at(2026, 11, 30, 22, 50), status="error"))
    records += [agent.record(b1, start_ns=at(2026, 11, 30, 22), tokens_in=1000) for _ in range(5)]
    return records


@pytest.fixture
def world(rollups: None) -> World:
    """The scenario's tenants and contracts, with its records ingested (one signed batch)."""
    tenant_a = TenantFactory.create(code="usage-a")
    tenant_b = TenantFactory.create(code="usage-b")
    p1 = ComputePackageFactory.create(code="usage-p1")
    p2 = ComputePackageFactory.create(code="usage-p2")
    a1 = ContractFactory.create(code="usage-a1", tenant=tenant_a, package=p1)
    a2 = ContractFactory.create(code="usage-a2", tenant=tenant_a, package=p2)
    b1 = ContractFactory.create(code="usage-b1", tenant=tenant_b, package=p1)
    world = World(tenant_a, tenant_b, a1, a2, b1, signing_agent(a1, a2, b1, agent_id="usage-agent"))
    answer = ingest(world.agent, scenario_records(world))
    assert answer["accepted"] == 14, answer
    return world
