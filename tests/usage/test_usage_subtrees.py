"""GET /v1/usage/subtrees: the serving subtrees that answered the caller, from the caller's own signed
records (P99, requests in flight, wait in line, answers per bucket) and the scheduler events of the
routers that decided them; never another tenant's figures, another subtree, or another router's events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from accounts.models import Tenant
from agents.models import Agent
from scheduling.services import EventInput, record_scheduler_events
from tests.billing.usage import ingest, routed_record
from tests.factories import ContractFactory, TenantFactory, signing_agent
from tests.finance.support import owner_client, staff_client
from treemeter_records import new_record_id

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
DAY = datetime(2026, 11, 3, tzinfo=UTC)
WINDOW = {"start": "2026-11-03", "end": "2026-11-04"}  # a day: buckets of 86,400 s ÷ 720 = 120 s
SERVED = DAY + timedelta(hours=8, minutes=5, seconds=10)  # in the bucket of 08:04


def _event(at: datetime, kind: str, subtree: str, **figures: float) -> EventInput:
    moved = kind in ("borrow", "return")
    return EventInput(
        id=new_record_id(),
        kind=kind,
        at_ns=int(at.timestamp()) * 10**9,
        subtree=subtree,
        reason=f"{kind} of {subtree}",
        figures=figures,
        executor="x-1,x-2" if moved else "",
        lender="batch" if moved else "",
    )


def _answer(client: Client, **params: str) -> Any:
    response = client.get("/v1/usage/subtrees", {**WINDOW, **params})
    assert response.status_code == 200, response.content
    assert (response["X-Usage-Source"], response["X-Usage-Cache"]) == ("raw", "miss")
    return response.json()


def _iso(instant: datetime) -> str:
    return instant.isoformat()


@pytest.fixture
def tenants() -> tuple[Tenant, Tenant]:
    """Alpha: 3 requests decided for `finance` (waits of 10, 20 and 30 ms), 1 for `batch` three minutes
    later. Bravo, through the same router and executor: 1 for `finance` (a 90 ms wait) and 2 for `legal`.
    Router l1-r's events: finance scaled to 3 (objective 300 ms) and lent 2 executors and given them back,
    legal scaled, and finance scaled the next day (outside the window). Router l1-other's finance event."""
    alpha, bravo = TenantFactory.create(code="alpha-co"), TenantFactory.create(code="bravo-co")
    ours, theirs = ContractFactory.create(tenant=alpha), ContractFactory.create(tenant=bravo)
    router = signing_agent(ours, theirs, agent_id="l1-r", kind="router")
    executor = signing_agent(ours, theirs, agent_id="exec-r")
    ingest(
        executor,
        [
            routed_record(executor, router, ours, "finance", SERVED, queued_us=q)
            for q in (10_000, 20_000, 30_000)
        ]
        + [routed_record(executor, router, ours, "batch", SERVED + timedelta(minutes=3))]
        + [routed_record(executor, router, theirs, "finance", SERVED, queued_us=90_000)]
        + [routed_record(executor, router, theirs, "legal", SERVED) for _ in range(2)],
    )
    record_scheduler_events(
        router=Agent.objects.get(agent_id="l1-r"),
        events=[
            _event(DAY + timedelta(hours=8, minutes=6), "scale_up", "finance", desired=3, sla_p99_ms=300.0),
            _event(DAY + timedelta(hours=8, minutes=7), "borrow", "finance", executors=2, load=0.9),
            _event(DAY + timedelta(hours=8, minutes=20), "return", "finance", executors=2, load=0.6),
            _event(DAY + timedelta(hours=8, minutes=9), "scale_up", "legal", desired=2, sla_p99_ms=900.0),
            _event(DAY + timedelta(days=1, hours=1), "scale_down", "finance", desired=2),
        ],
    )
    other = signing_agent(agent_id="l1-other", kind="router")
    record_scheduler_events(
        router=Agent.objects.get(agent_id=other.agent_id),
        events=[_event(DAY + timedelta(hours=8, minutes=10), "scale_up", "finance", desired=9)],
    )
    return alpha, bravo


def test_a_customer_sees_the_subtrees_that_answered_it_from_its_own_records(
    tenants: tuple[Tenant, Tenant],
) -> None:
    """3 answers of 150 ms (each record's end − start) in a 120 s bucket: 0.45 s ÷ 120 s = 0.00375 in
    flight; waits 10, 20, 30 ms average 20. Bravo's finance request (a 90 ms wait) is not alpha's, legal is
    not alpha's subtree, and l1-other decided none of alpha's requests."""
    alpha, _ = tenants
    bucket = DAY + timedelta(hours=8, minutes=4)
    assert _answer(owner_client(alpha)) == {
        "bucket_s": 120,
        "subtrees": [
            {
                "subtree": "batch",
                "sla_p99_ms": None,
                # 0.15 s ÷ 120 s = 0.00125 in flight
                "service": [[_iso(bucket + timedelta(minutes=4)), "150.000", "0.001", "0.000", 1]],
                "replicas": [],
                "moves": [],
            },
            {
                "subtree": "finance",
                "sla_p99_ms": "300.000",
                "service": [[_iso(bucket), "150.000", "0.004", "20.000", 3]],
                "replicas": [[_iso(DAY + timedelta(hours=8, minutes=6)), 3, "scale_up"]],
                "moves": [
                    [_iso(DAY + timedelta(hours=8, minutes=7)), "borrow", 2],
                    [_iso(DAY + timedelta(hours=8, minutes=20)), "return", 2],
                ],
            },
        ],
        "events_truncated": False,
    }


def test_the_other_tenant_sees_only_its_own_requests_and_staff_see_all(
    tenants: tuple[Tenant, Tenant],
) -> None:
    alpha, bravo = tenants
    theirs = {tree["subtree"]: tree for tree in _answer(owner_client(bravo))["subtrees"]}
    assert sorted(theirs) == ["finance", "legal"]
    assert theirs["finance"]["service"][0][3:] == ["90.000", 1]
    assert theirs["legal"]["replicas"] == [[_iso(DAY + timedelta(hours=8, minutes=9)), 2, "scale_up"]]
    assert theirs["legal"]["sla_p99_ms"] == "900.000"

    everyone = {tree["subtree"]: tree for tree in _answer(staff_client())["subtrees"]}
    assert sorted(everyone) == ["batch", "finance", "legal"]
    assert everyone["finance"]["service"][0][3:] == ["37.500", 4]  # (10 + 20 + 30 + 90) ÷ 4
    only_alpha = _answer(staff_client(), tenant=alpha.code)["subtrees"]
    assert [tree["subtree"] for tree in only_alpha] == ["batch", "finance"]


@pytest.mark.parametrize("hostile", [{"tenant": "bravo-co"}, {"contract": "their-contract"}])
def test_naming_another_tenant_or_its_contract_answers_nothing(
    tenants: tuple[Tenant, Tenant], hostile: dict[str, str]
) -> None:
    alpha, bravo = tenants
    if "contract" in hostile:
        hostile = {"contract": bravo.contracts.get().code}
    assert _answer(owner_client(alpha), **hostile)["subtrees"] == []


def test_an_event_stored_after_an_answer_is_in_the_next_answer(tenants: tuple[Tenant, Tenant]) -> None:
    """The answer is never kept: the scheduler's events change without a new version of the records."""
    alpha, _ = tenants
    client = owner_client(alpha)
    assert len(_finance(client)["replicas"]) == 1
    step = _event(DAY + timedelta(hours=9), "scale_down", "finance", desired=2)
    record_scheduler_events(router=Agent.objects.get(agent_id="l1-r"), events=[step])
    assert _finance(client)["replicas"][-1] == [_iso(DAY + timedelta(hours=9)), 2, "scale_down"]


def _finance(client: Client) -> dict[str, Any]:
    return next(tree for tree in _answer(client)["subtrees"] if tree["subtree"] == "finance")


@pytest.mark.parametrize(
    ("query", "field"),
    [({"start": "2026-11-04", "end": "2026-11-03"}, "end"), ({"start": "yesterday"}, "start")],
)
def test_a_bad_window_is_400_naming_the_field(
    tenants: tuple[Tenant, Tenant], query: dict[str, str], field: str
) -> None:
    response = owner_client(tenants[0]).get("/v1/usage/subtrees", query)
    assert response.status_code == 400, response.content
    body = response.json()
    assert (body["code"], list(body["details"])) == ("invalid_request", [field])


def test_without_credentials_the_answer_is_refused(tenants: tuple[Tenant, Tenant]) -> None:
    assert Client().get("/v1/usage/subtrees", WINDOW).status_code in (401, 403)
