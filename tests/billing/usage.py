"""Helpers for billing tests: send real signed records through the ingest API for a contract."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.test import Client

from contracts.models import Contract
from tests.factories import SigningAgent, signing_agent

_agents: dict[int, SigningAgent] = {}


def at(year: int, month: int, day: int, hour: int = 0) -> int:
    """A record start time in ns."""
    return int(datetime(year, month, day, hour, tzinfo=UTC).timestamp()) * 10**9


def send(contract: Contract, count: int, start_ns: int, **overrides: Any) -> None:
    """`count` records for the contract, through POST /v1/ingest/batches (one signed batch)."""
    send_each(contract, [{"start_ns": start_ns, **overrides}] * count)


def send_each(contract: Contract, fields: list[dict[str, Any]]) -> None:
    """One record per dict of field overrides (start_ns included), in one signed batch, in that order."""
    agent = signing_agent(contract, agent_id=f"agent-{contract.code}") if contract.pk not in _agents else None
    if agent is not None:
        _agents[contract.pk] = agent
    agent = _agents[contract.pk]
    records = [agent.record(contract, **overrides) for overrides in fields]
    response = Client().post(
        "/v1/ingest/batches", data=agent.batch(records).body(), content_type="application/x-ndjson"
    )
    assert response.status_code == 200, response.content


def forget_agents() -> None:
    _agents.clear()
