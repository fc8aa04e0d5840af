"""Helpers for SLA tests: policies with the AWS Bedrock-style ladder and records written to ClickHouse."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import orjson

from clickhouse_store import query
from contracts.models import Contract
from sla.models import CreditStep, Objective, SlaPolicy
from tests.factories import SigningAgent

LADDER = [("99.9", "10"), ("99", "25"), ("95", "100")]


def ns(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, tz: Any = UTC
) -> int:
    """Nanoseconds since the epoch of a wall-clock time (UTC unless tz is given)."""
    return int(datetime(year, month, day, hour, minute, second, tzinfo=tz).timestamp()) * 10**9


def make_policy(
    contract: Contract | None = None,
    *,
    package: Any = None,
    time_zone: str = "Asia/Shanghai",
    availability: str | None = "99.9",
    latency: Iterable[tuple[str, str, str]] = (),
    ladder: Iterable[tuple[str, str]] = LADDER,
) -> SlaPolicy:
    """A policy with an availability objective carrying `ladder`, plus (layer, ms, target) latency ones."""
    policy = SlaPolicy.objects.create(
        name=f"SLA {contract.code if contract else package.code}",
        contract=contract,
        package=package,
        time_zone=time_zone,
    )
    if availability is not None:
        objective = Objective.objects.create(
            policy=policy, name="availability", kind="availability", target_percent=Decimal(availability)
        )
        for below, credit in ladder:
            CreditStep.objects.create(
                objective=objective, below_percent=Decimal(below), credit_percent=Decimal(credit)
            )
    for layer, ms, target in latency:
        Objective.objects.create(
            policy=policy,
            name=f"latency-{layer}",
            kind="latency",
            layer=layer,
            threshold_ms=Decimal(ms),
            target_percent=Decimal(target),
        )
    return policy


def store(records: list[dict[str, Any]]) -> None:
    """Write records straight into ClickHouse, as ingest stores them."""
    query.insert_json_lines("usage_records", b"\n".join(orjson.dumps(r) for r in records))


def records(
    agent: SigningAgent, contract: Contract, count: int, start_ns: int, step_ns: int = 10**9, **fields: Any
):
    """`count` records from start_ns on, step_ns apart."""
    return [agent.record(contract, start_ns=start_ns + i * step_ns, **fields) for i in range(count)]
