"""POST /v1/agents/scheduler-events: an L1 router's scheduler events, signed like every agent request,
stored once each (a retried post counts duplicates), refused whole with a code naming what is wrong;
never a 500."""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.models import Agent, AgentKey
from agents.services import register_agent
from scheduling.models import SchedulerEvent
from treemeter_records import new_record_id, private_key_from_seed, protocol, public_key_to_b64

pytestmark = pytest.mark.django_db

PATH = protocol.SCHEDULER_EVENTS_PATH
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DELETE = object()  # a field left out of the event


class Caller:
    """An agent that signs its posts as compute_agents.tree.events.EventShipper does: registered as
    `kind` unless `registered` is False (an impostor using a registered agent's id with its own key)."""

    def __init__(
        self, agent_id: str = "l1-router", kind: str = Agent.Kind.ROUTER, registered: bool = True
    ) -> None:
        self.key = private_key_from_seed(os.urandom(32))
        self.agent_id = agent_id
        if registered:
            register_agent(
                agent_id=agent_id, public_key_b64=public_key_to_b64(self.key), tenant_codes=[], kind=kind
            )

    def post_raw(self, client: Client, body: bytes, **overrides: str) -> Any:
        headers = protocol.signed_headers(self.key, self.agent_id, "POST", PATH, body)
        client.raise_request_exception = False
        return client.post(PATH, body, content_type="application/json", headers={**headers, **overrides})

    def post(self, client: Client, events: list[dict[str, Any]]) -> Any:
        return self.post_raw(client, json.dumps({"events": events}).encode())


def event(**overrides: Any) -> dict[str, Any]:
    """A valid scaling step a minute ago, with any field changed (or left out: DELETE)."""
    body: dict[str, Any] = {
        "id": new_record_id(),
        "kind": "scale_up",
        "at_ns": time.time_ns() - 60 * 10**9,
        "subtree": "finance",
        "reason": "p99 412 ms over 300 ms for 3 periods",
        "figures": {"p99_ms": 412.5, "replicas": 2.0, "desired": 4.0},
    }
    for name, value in overrides.items():
        if value is DELETE:
            body.pop(name, None)
        else:
            body[name] = value
    return body


def borrow(**overrides: Any) -> dict[str, Any]:
    return event(
        kind="borrow",
        subtree="finance",
        executor="b-1,b-2",
        lender="batch",
        reason="load above 90% for 3 periods (97.0% now); batch's queue 0",
        figures={"load": 0.97, "periods": 3.0, "lender_load": 0.1, "lender_queue": 0.0, "executors": 2.0},
        **overrides,
    )


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content[:500]
    body = response.json()
    assert set(body) == {"code", "message", "details"} and body["code"] == code, body
    return body


def test_a_router_posts_events_and_each_is_stored_once(client: Client) -> None:
    router = Caller()
    events = [
        borrow(),
        event(
            kind="return", executor="b-1,b-2", lender="batch", reason="load 20% under 50% after 900 s held"
        ),
        event(),
    ]
    answer = router.post(client, events)
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"accepted": 3, "duplicates": 0}

    stored = {str(row.event_id): row for row in SchedulerEvent.objects.select_related("router")}
    assert set(stored) == {e["id"] for e in events}
    for sent in events:
        row = stored[sent["id"]]
        assert row.router.agent_id == "l1-router"
        assert (row.kind, row.at_ns, row.subtree, row.reason) == (
            sent["kind"],
            sent["at_ns"],
            sent["subtree"],
            sent["reason"],
        )
        assert (row.executor, row.lender) == (sent.get("executor", ""), sent.get("lender", ""))
        assert row.figures == sent["figures"]
        assert row.at.utcoffset() == timedelta(0) and row.received_at.utcoffset() == timedelta(0)
        assert row.at == EPOCH + timedelta(microseconds=sent["at_ns"] // 1000)

    again = router.post(client, events)
    assert again.status_code == 200 and again.json() == {"accepted": 0, "duplicates": 3}
    assert SchedulerEvent.objects.count() == 3

    newer = event(kind="scale_down", figures={"p99_ms": 80.0, "replicas": 4.0, "desired": 2.0})
    partly = router.post(client, [events[2], newer])
    assert partly.json() == {"accepted": 1, "duplicates": 1}
    assert SchedulerEvent.objects.count() == 4


def test_the_same_id_in_one_post_twice_is_stored_once(client: Client) -> None:
    one = event()
    answer = Caller().post(client, [one, dict(one)])
    assert answer.json() == {"accepted": 1, "duplicates": 1}
    assert SchedulerEvent.objects.count() == 1


def test_an_empty_post_stores_nothing(client: Client) -> None:
    answer = Caller().post(client, [])
    assert answer.status_code == 200 and answer.json() == {"accepted": 0, "duplicates": 0}


def test_two_routers_may_use_the_same_event_id(client: Client) -> None:
    shared = event()
    assert Caller("l1-a").post(client, [shared]).json() == {"accepted": 1, "duplicates": 0}
    assert Caller("l1-b").post(client, [shared]).json() == {"accepted": 1, "duplicates": 0}
    assert SchedulerEvent.objects.count() == 2


def test_the_same_id_with_other_content_is_409_and_nothing_of_that_post_is_stored(client: Client) -> None:
    router = Caller()
    first = event()
    assert router.post(client, [first]).status_code == 200
    fresh = event(subtree="batch")
    changed = {**first, "reason": "another reason", "figures": {**first["figures"], "desired": 5.0}}
    body = assert_error(router.post(client, [fresh, changed]), 409, "event_conflict")
    assert body["details"]["id"] == first["id"] and first["id"] in body["message"]
    assert body["details"]["index"] == 1 and body["details"]["fields"] == ["reason", "figures"]
    assert SchedulerEvent.objects.count() == 1
    assert not SchedulerEvent.objects.filter(event_id=fresh["id"]).exists()
    assert SchedulerEvent.objects.get().reason == first["reason"]


def test_one_id_twice_in_a_post_with_other_content_is_409(client: Client) -> None:
    one = event()
    body = assert_error(
        Caller().post(client, [one, {**one, "at_ns": one["at_ns"] + 1}]), 409, "event_conflict"
    )
    assert body["details"]["id"] == one["id"] and body["details"]["fields"] == ["at_ns"]
    assert SchedulerEvent.objects.count() == 0


def test_an_executor_is_not_a_router(client: Client) -> None:
    executor = Caller("gpu-1", kind=Agent.Kind.EXECUTOR)
    body = assert_error(executor.post(client, [event()]), 403, "not_a_router")
    assert body["details"] == {"agent_id": "gpu-1", "kind": "executor"}
    assert SchedulerEvent.objects.count() == 0


def _unsigned(router: Caller, client: Client, body: bytes) -> Any:
    return client.post(PATH, body, content_type="application/json")


def _signed_by_another_key(router: Caller, client: Client, body: bytes) -> Any:
    other = private_key_from_seed(os.urandom(32))
    headers = protocol.signed_headers(router.key, router.agent_id, "POST", PATH, body)
    now = int(headers[protocol.HEADER_TIMESTAMP])
    headers[protocol.HEADER_SIGNATURE] = protocol.sign_request(other, "POST", PATH, now, body)
    return client.post(PATH, body, content_type="application/json", headers=headers)


def _tampered(router: Caller, client: Client, body: bytes) -> Any:
    headers = protocol.signed_headers(router.key, router.agent_id, "POST", PATH, body)
    forged = body.replace(b"finance", b"batches")
    return client.post(PATH, forged, content_type="application/json", headers=headers)


def _stale(router: Caller, client: Client, body: bytes) -> Any:
    headers = protocol.signed_headers(router.key, router.agent_id, "POST", PATH, body)
    then = time.time_ns() - 301 * 10**9
    headers[protocol.HEADER_TIMESTAMP] = str(then)
    headers[protocol.HEADER_SIGNATURE] = protocol.sign_request(router.key, "POST", PATH, then, body)
    return client.post(PATH, body, content_type="application/json", headers=headers)


def _timestamp_not_a_number(router: Caller, client: Client, body: bytes) -> Any:
    return router.post_raw(client, body, **{protocol.HEADER_TIMESTAMP: "yesterday"})


def _unregistered_key(router: Caller, client: Client, body: bytes) -> Any:
    return Caller(router.agent_id, registered=False).post_raw(client, body)


def _another_agents_id(router: Caller, client: Client, body: bytes) -> Any:
    return router.post_raw(client, body, **{protocol.HEADER_AGENT: "l1-other"})


@pytest.mark.parametrize(
    ("send", "code"),
    [
        (_unsigned, "bad_request_signature"),
        (_signed_by_another_key, "bad_request_signature"),
        (_tampered, "bad_request_signature"),
        (_stale, "stale_request"),
        (_timestamp_not_a_number, "bad_request_signature"),
        (_unregistered_key, "bad_request_signature"),
        (_another_agents_id, "bad_request_signature"),
    ],
)
def test_a_post_not_signed_by_the_routers_active_key_is_401(client: Client, send: Any, code: str) -> None:
    router = Caller()
    body = json.dumps({"events": [event()]}).encode()
    assert_error(send(router, client, body), 401, code)
    assert SchedulerEvent.objects.count() == 0


def test_a_revoked_key_or_an_inactive_router_is_401(client: Client) -> None:
    revoked = Caller("l1-revoked")
    AgentKey.objects.filter(agent__agent_id=revoked.agent_id).update(revoked_at=timezone.now())
    assert_error(revoked.post(client, [event()]), 401, "bad_request_signature")
    inactive = Caller("l1-inactive")
    Agent.objects.filter(agent_id=inactive.agent_id).update(active=False)
    assert_error(inactive.post(client, [event()]), 401, "bad_request_signature")
    assert SchedulerEvent.objects.count() == 0


NOW_NS = time.time_ns()
# (field, value, the field the refusal names, the case's test id: fixed, so that every pytest-xdist worker
# collects the same ids although some values are drawn at import)
BAD_FIELDS = [
    ("id", "not-a-uuid", "id", "id-not-a-uuid"),
    ("id", str(uuid.uuid4()), "id", "id-uuid4"),  # the router's ids are UUIDv7
    ("id", new_record_id().upper(), "id", "id-uppercase"),  # not the canonical lowercase form
    ("id", DELETE, "id", "id-missing"),
    ("kind", "borrowed", "kind", "kind-unknown"),
    ("kind", None, "kind", "kind-null"),
    ("at_ns", str(NOW_NS), "at_ns", "at_ns-string"),
    ("at_ns", float(NOW_NS), "at_ns", "at_ns-float"),
    ("at_ns", True, "at_ns", "at_ns-boolean"),
    ("at_ns", 946_684_799 * 10**9, "at_ns", "at_ns-before-2000"),
    ("at_ns", 20 * 10**9, "at_ns", "at_ns-monotonic-clock"),
    ("at_ns", NOW_NS + 3600 * 10**9, "at_ns", "at_ns-an-hour-ahead"),
    ("at_ns", 2**63, "at_ns", "at_ns-past-a-bigint"),
    ("subtree", "Finance", "subtree", "subtree-uppercase"),
    ("subtree", "", "subtree", "subtree-empty"),
    ("subtree", "a" * 65, "subtree", "subtree-too-long"),
    ("subtree", "fin\x01ance", "subtree", "subtree-control-character"),
    ("executor", "b-1,,b-2", "executor", "executor-empty-id"),
    ("executor", "B-1", "executor", "executor-uppercase"),
    ("lender", "Batch", "lender", "lender-uppercase"),
    ("lender", 7, "lender", "lender-number"),
    ("reason", 12, "reason", "reason-number"),
    ("reason", "r" * 501, "reason", "reason-too-long"),
    ("reason", DELETE, "reason", "reason-missing"),
    ("figures", {"P99": 1.0}, "figures", "figure-name-uppercase"),
    ("figures", {"p 99": 1.0}, "figures", "figure-name-space"),
    ("figures", {"load": "NaN"}, "figures", "figure-nan-string"),  # JSON has no NaN; a string is no number
    ("figures", {"load": 1e300}, "figures", "figure-huge"),
    ("figures", {"load": -(10**16)}, "figures", "figure-huge-negative-integer"),
    ("figures", {"ok": True}, "figures", "figure-boolean"),
    ("figures", {"load": None}, "figures", "figure-null"),
    ("figures", {"load": [1]}, "figures", "figure-list"),
    ("figures", [1, 2], "figures", "figures-list"),
    ("figures", {f"f{i}": 1 for i in range(17)}, "figures", "figures-more-than-16"),
    ("surplus", "x", "surplus", "unknown-field"),
]


@pytest.mark.parametrize(
    ("name", "value", "field"), [case[:3] for case in BAD_FIELDS], ids=[case[3] for case in BAD_FIELDS]
)
def test_each_bad_field_is_400_invalid_event_naming_index_and_field(
    client: Client, name: str, value: Any, field: str
) -> None:
    good = event()
    answer = Caller().post(client, [good, event(**{name: value})])
    body = assert_error(answer, 400, "invalid_event")
    assert (body["details"]["index"], body["details"]["field"]) == (1, field), body
    assert body["message"].startswith(f"Event 1: {field}:")
    assert SchedulerEvent.objects.count() == 0  # not even the good one: a post is stored whole or not at all


def test_an_item_that_is_not_an_object_is_an_invalid_event(client: Client) -> None:
    answer = Caller().post(client, [event(), 7])  # type: ignore[list-item]
    body = assert_error(answer, 400, "invalid_event")
    assert (body["details"]["index"], body["details"]["field"]) == (1, "event")


def test_the_bounds_hold_at_the_limits(client: Client) -> None:
    at_the_edge = event(
        subtree="a" * 64,
        lender="z" * 64,
        executor=",".join(f"e{i:03d}" for i in range(200)),  # 999 characters
        reason="r" * 500,
        figures={f"f{i}": -1e15 if i % 2 else 1e15 for i in range(16)},
        at_ns=time.time_ns() + 240 * 10**9,
    )
    answer = Caller().post(client, [at_the_edge])
    assert answer.status_code == 200, answer.content
    assert SchedulerEvent.objects.get().figures == at_the_edge["figures"]


def test_500_events_are_taken_and_501_are_too_many(client: Client) -> None:
    router = Caller()
    body = assert_error(router.post(client, [event() for _ in range(501)]), 400, "too_many_events")
    assert body["details"]["max_events"] == protocol.SCHEDULER_EVENTS_MAX == 500
    assert SchedulerEvent.objects.count() == 0
    answer = router.post(client, [event() for _ in range(500)])
    assert answer.status_code == 200 and answer.json() == {"accepted": 500, "duplicates": 0}


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"[]", "invalid_request"),
        (b'"events"', "invalid_request"),
        (b"7", "invalid_request"),
        (b"null", "invalid_request"),
        (b"{}", "invalid_request"),
        (b'{"events": {}}', "invalid_request"),
        (b'{"events": null}', "invalid_request"),
        (b'{"events": "all"}', "invalid_request"),
        (b"{not json", "malformed_json"),
        (b'{"events": [{"figures": {"load": 1e400}}]}', "malformed_json"),
        (b"", "invalid_request"),
    ],
)
def test_a_body_that_is_not_an_object_of_events_is_400(client: Client, raw: bytes, code: str) -> None:
    assert_error(Caller().post_raw(client, raw), 400, code)
    assert SchedulerEvent.objects.count() == 0


def test_the_endpoint_takes_only_post(client: Client) -> None:
    assert_error(client.get(PATH), 405, "method_not_allowed")


def test_the_endpoint_is_in_the_openapi_document() -> None:
    doc = Client().get("/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    operation = doc["paths"][PATH]["post"]
    headers = {p["name"] for p in operation["parameters"] if p["in"] == "header"}
    assert headers == {
        protocol.HEADER_AGENT,
        protocol.HEADER_KEY_ID,
        protocol.HEADER_TIMESTAMP,
        protocol.HEADER_SIGNATURE,
    }
    answer = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert answer.endswith("/SchedulerEventsAnswer")
    item = doc["components"]["schemas"]["SchedulerEvent"]
    assert set(item["properties"]) == {
        "id", "kind", "at_ns", "subtree", "executor", "lender", "reason", "figures"
    }  # fmt: skip


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
FIELD_NAMES = st.sampled_from(["id", "kind", "at_ns", "subtree", "executor", "lender", "reason", "figures"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(FIELD_NAMES, JSON_VALUES, max_size=3))
def test_no_event_is_ever_a_500(client: Client, changes: dict[str, Any]) -> None:
    router = Caller(f"l1-{new_record_id()[-12:]}")
    answer = router.post(client, [event(**changes)])
    assert answer.status_code in (200, 400, 409), answer.content[:300]
    assert set(answer.json()) in ({"accepted", "duplicates"}, {"code", "message", "details"})
