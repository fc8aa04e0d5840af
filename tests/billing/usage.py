"""Helpers for billing tests: send real signed records through the ingest API for a contract."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.test import Client

from contracts.models import Contract
from tests.factories import SigningAgent, signing_agent
from treemeter_records import protocol, sign_record
from treemeter_records.timeutil import unix_nanos

NODE = "l1.00112233445566ff"

_agents: dict[int, SigningAgent] = {}


def at(year: int, month: int, day: int, hour: int = 0) -> int:
    """A record start time in ns."""
    return int(datetime(year, month, day, hour, tzinfo=UTC).timestamp()) * 10**9


def send(contract: Contract, count: int, start_ns: int, **overrides: Any) -> None:
    """`count` records for the contract, through POST /v1/ingest/batches (one signed batch)."""
    send_each(contract, [{"start_ns": start_ns, **overrides}] * count)


def send_each(contract: Contract, fields: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per dict of field overrides (start_ns included), in one signed batch, in that order;
    the records sent."""
    agent = signing_agent(contract, agent_id=f"agent-{contract.code}") if contract.pk not in _agents else None
    if agent is not None:
        _agents[contract.pk] = agent
    agent = _agents[contract.pk]
    records = [agent.record(contract, **overrides) for overrides in fields]
    response = Client().post(
        "/v1/ingest/batches", data=agent.batch(records).body(), content_type="application/x-ndjson"
    )
    assert response.status_code == 200, response.content
    return records


def forget_agents() -> None:
    _agents.clear()


def routed_record(
    executor: SigningAgent,
    router: SigningAgent,
    contract: Contract,
    subtree: str,
    at: datetime,
    queued_us: int = 0,
) -> dict[str, Any]:
    """A signed v2 record: a successful request decided by ``router`` for ``subtree`` after ``queued_us``
    in its line, served by ``executor`` (L3 90,000 µs, 150 ms from arrival to answer)."""
    start_ns = unix_nanos(at)
    record = executor.record(
        contract,
        start_ns=start_ns,
        hops=[
            {"layer": "L1", "node": NODE, "latency_us": 0},
            {"layer": "L3", "node": f"{executor.agent_id}.l3", "latency_us": 90_000},
            {"layer": "L1", "node": NODE, "latency_us": 0},
        ],
    )
    claims = {
        "record_id": record["record_id"],
        "router": router.agent_id,
        "node": NODE,
        "rules_sha256": "00112233445566ff" * 4,
        "domain": "contract_review",
        "confidence_ppm": 930_000,
        "l2_confirmation": False,
        "path": ["L1", "L3", "L1"],
        "subtree": subtree,
        "executor": executor.agent_id,
        "preheat": [],
        "l1_in_us": 0,
        "decided_ns": start_ns + queued_us * 1000,
        **({"queued_us": queued_us} if queued_us else {}),
    }
    return sign_record(record, protocol.sign_decision(router.key, claims), executor.key)


def ingest(agent: SigningAgent, records: list[dict[str, Any]]) -> None:
    response = Client().post(
        "/v1/ingest/batches", data=agent.batch(records).body(), content_type="application/x-ndjson"
    )
    assert response.status_code == 200, response.content
