"""The time window of records: from the contract's late-usage horizon (or INGEST_MAX_PAST_DAYS) back,
to INGEST_MAX_FUTURE_SKEW_SECONDS ahead, on the platform's clock after the agent's measured drift."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.test import Client

from contracts.models import Contract
from tests.factories import ContractFactory, SigningAgent, signing_agent
from tests.ingest.support import assert_stores_agree, post

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
DAY_NS = 86_400 * 10**9
SECOND_NS = 10**9


@pytest.fixture(autouse=True)
def production_window(settings: Any) -> None:
    settings.INGEST_MAX_PAST_DAYS = 35  # the suite widens it (tests/conftest.py); the default is 35
    settings.INGEST_MAX_FUTURE_SKEW_SECONDS = 300


@pytest.fixture
def contract() -> Any:
    return ContractFactory.create()


@pytest.fixture
def agent(contract: Any) -> SigningAgent:
    return signing_agent(contract)


def answer_for(client: Client, agent: SigningAgent, contract: Any, **fields: Any) -> dict[str, Any]:
    response = post(client, agent.batch([agent.record(contract, **fields)]).body())
    assert response.status_code in (200, 422), response.content
    return response.json()


def refusal(body: dict[str, Any]) -> tuple[str, str] | None:
    if body["accepted"]:
        return None
    return body["rejections"][0]["code"], body["rejections"][0]["field"]


@pytest.mark.parametrize(
    "start_ns",
    [1, 946_684_800 * SECOND_NS, time.time_ns() - 36 * DAY_NS],  # 1970, the year 2000, a closed month
    ids=["1970", "2000", "36-days-ago"],
)
def test_records_from_before_the_window_are_refused(
    client: Client, contract: Any, agent: SigningAgent, start_ns: int
) -> None:
    body = answer_for(client, agent, contract, start_ns=start_ns)
    assert refusal(body) == ("timestamp_out_of_window", "start_ns")
    assert body["rejections"][0]["message"] == "start_ns is more than 35 days before the platform's clock."
    assert assert_stores_agree() == 0


def test_a_late_record_inside_the_window_is_accepted(
    client: Client, contract: Any, agent: SigningAgent
) -> None:
    assert refusal(answer_for(client, agent, contract, start_ns=time.time_ns() - 34 * DAY_NS)) is None
    assert assert_stores_agree() == 1


def test_the_contracts_late_usage_horizon_sets_the_window(client: Client) -> None:
    contract = ContractFactory.create(late_usage_policy=Contract.LateUsage.IGNORE_AFTER, late_usage_days=90)
    agent = signing_agent(contract)
    now = time.time_ns()
    assert refusal(answer_for(client, agent, contract, start_ns=now - 60 * DAY_NS)) is None
    assert refusal(answer_for(client, agent, contract, start_ns=now - 91 * DAY_NS)) == (
        "timestamp_out_of_window",
        "start_ns",
    )


def test_records_ahead_of_the_platform_clock_are_refused_beyond_the_skew(
    client: Client, contract: Any, agent: SigningAgent
) -> None:
    now = time.time_ns()
    assert refusal(answer_for(client, agent, contract, start_ns=now + 290 * SECOND_NS)) is None
    assert refusal(answer_for(client, agent, contract, start_ns=now + 310 * SECOND_NS)) == (
        "timestamp_out_of_window",
        "start_ns",
    )
    ends_late = {"start_ns": now, "end_ns": now + 400 * SECOND_NS}
    assert refusal(answer_for(client, agent, contract, **ends_late)) == ("timestamp_out_of_window", "end_ns")


def test_the_agents_measured_drift_corrects_its_clock(
    client: Client, contract: Any, agent: SigningAgent
) -> None:
    """An agent whose clock runs ten minutes ahead says so (clock_drift_us = platform - agent)."""
    ahead = time.time_ns() + 600 * SECOND_NS
    assert refusal(answer_for(client, agent, contract, start_ns=ahead, clock_drift_us=0)) is not None
    assert refusal(answer_for(client, agent, contract, start_ns=ahead, clock_drift_us=-600_000_000)) is None
