"""Dashboard answers come from the cache only while the data they were computed from is unchanged:
ingest of a tenant's records, or a rollup rebuild, makes the next answer a fresh one with the new
figures (usage.cache)."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client, override_settings

from sla.models import Objective, SlaPolicy
from tests.usage.conftest import World, at, ingest
from usage.services import rebuild_rollups

pytestmark = pytest.mark.django_db

DAYS = {"start": "2026-11-30", "end": "2026-12-02"}


def ask(client: Client, endpoint: str = "breakdown", **params: Any) -> tuple[str, Any]:
    response = client.get(f"/v1/usage/{endpoint}", {"by": "contract", **DAYS, **params})
    assert response.status_code == 200, response.content
    return response["X-Usage-Cache"], response.json()


def requests_of(body: Any) -> dict[str, str]:
    return {row["key"]: row["requests"] for row in body["rows"]}


def test_a_repeated_question_is_answered_from_the_cache_until_the_tenant_ingests(world: World) -> None:
    client = world.client(world.tenant_a)
    assert ask(client) == ("miss", ask(client)[1])
    state, body = ask(client)
    assert state == "hit"
    assert requests_of(body) == {"usage-a1": "6", "usage-a2": "3"}

    ingest(world.agent, [world.agent.record(world.a1, start_ns=at(2026, 12, 1, 5)) for _ in range(4)])

    state, body = ask(client)
    assert state == "miss"
    assert requests_of(body) == {"usage-a1": "10", "usage-a2": "3"}
    assert ask(client)[0] == "hit"


def test_another_tenants_ingest_keeps_this_tenants_answers_and_retires_the_staff_view(world: World) -> None:
    tenant_a, staff = world.client(world.tenant_a), world.client(None)
    ask(tenant_a)
    assert requests_of(ask(staff)[1]) == {"usage-a1": "6", "usage-a2": "3", "usage-b1": "5"}

    ingest(world.agent, [world.agent.record(world.b1, start_ns=at(2026, 12, 1, 5))])

    assert ask(tenant_a)[0] == "hit"
    state, body = ask(staff)
    assert state == "miss"
    assert requests_of(body)["usage-b1"] == "6"


def test_tenants_asking_the_same_question_get_their_own_answers(world: World) -> None:
    assert requests_of(ask(world.client(world.tenant_a))[1]) == {"usage-a1": "6", "usage-a2": "3"}
    state, body = ask(world.client(world.tenant_b))
    assert state == "miss"
    assert requests_of(body) == {"usage-b1": "5"}


def test_each_option_is_its_own_question(world: World) -> None:
    client = world.client(world.tenant_a)
    ask(client, "timeseries", dimension="requests", interval="day")
    assert ask(client, "timeseries", dimension="requests", interval="day")[0] == "hit"
    assert ask(client, "timeseries", dimension="tokens_in", interval="day")[0] == "miss"
    assert ask(client, "timeseries", dimension="requests", interval="hour")[0] == "miss"
    assert ask(client, "timeseries", dimension="requests", interval="day", package="usage-p1")[0] == "miss"
    assert ask(client, "breakdown", by="package")[0] == "miss"


def test_a_rollup_rebuild_retires_every_answer(world: World) -> None:
    client = world.client(world.tenant_a)
    ask(client)
    rebuild_rollups(date(2026, 11, 30), date(2026, 12, 2))
    assert ask(client)[0] == "miss"


def test_a_change_of_terms_retires_the_latency_answers_that_state_them(world: World) -> None:
    client = world.client(world.tenant_a)
    assert ask(client, "latency")[1]["sla"] == []
    ask(client)
    assert ask(client, "latency")[0] == "hit"

    policy = SlaPolicy.objects.create(name="A1 terms", contract=world.a1)
    state, body = ask(client, "latency")
    assert (state, body["sla"]) == ("miss", [])  # a policy without objectives states none
    objective = Objective.objects.create(
        policy=policy, name="e2e", kind="latency", layer="e2e", threshold_ms=Decimal(200), target_percent=99
    )
    state, body = ask(client, "latency")
    assert state == "miss"
    assert [(o["objective"], o["threshold_ms"], o["contracts"]) for o in body["sla"]] == [
        ("e2e", "200.000", ["usage-a1"])
    ]
    assert ask(client, "latency")[0] == "hit"
    assert ask(client)[0] == "hit"  # answers that state no terms are kept

    objective.threshold_ms = Decimal(150)
    objective.save()
    state, body = ask(client, "latency")
    assert (state, body["sla"][0]["threshold_ms"]) == ("miss", "150.000")

    world.a1.code = "usage-a1-renamed"
    world.a1.save()
    state, body = ask(client, "latency")
    assert (state, body["sla"][0]["contracts"]) == ("miss", ["usage-a1-renamed"])

    objective.delete()
    state, body = ask(client, "latency")
    assert (state, body["sla"]) == ("miss", [])


@override_settings(USAGE_ANSWER_CACHE_SECONDS=0)
def test_the_cache_can_be_turned_off(world: World) -> None:
    client = world.client(world.tenant_a)
    ask(client)
    assert ask(client)[0] == "miss"
