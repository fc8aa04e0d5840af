"""Outgoing webhooks: signatures, real HTTP delivery, retries with a per-attempt log, idempotency, tenancy."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import override_settings

from sla.alerts import evaluate_burn_rates
from tests.factories import ContractFactory, TenantFactory, signing_agent
from tests.sla.helpers import make_policy, records, store
from tests.webhooks.conftest import Receiver
from webhooks.delivery import retry_delay
from webhooks.models import WebhookDelivery, WebhookDeliveryAttempt, WebhookEndpoint, WebhookEvent
from webhooks.services import publish_event
from webhooks.signing import SignatureError, sign, verify_signature

SECRET = "whsec_test"
BODY = b'{"id":"evt_1"}'


def test_signature_round_trip() -> None:
    header = sign(SECRET, BODY, timestamp=1_800_000_000)
    assert header.startswith("t=1800000000,v1=") and len(header.split("v1=")[1]) == 64
    assert verify_signature(SECRET, header, BODY, now=1_800_000_100) == 1_800_000_000


@pytest.mark.parametrize(
    ("secret", "body", "now"),
    [
        (SECRET, b'{"id":"evt_2"}', 1_800_000_000),  # tampered body
        ("whsec_other", BODY, 1_800_000_000),  # wrong secret
        (SECRET, BODY, 1_800_000_301),  # replayed after the 300 s tolerance
    ],
)
def test_signature_refusals(secret: str, body: bytes, now: int) -> None:
    header = sign(SECRET, BODY, timestamp=1_800_000_000)
    with pytest.raises(SignatureError):
        verify_signature(secret, header, body, tolerance=300, now=now)


def test_malformed_header_is_refused() -> None:
    with pytest.raises(SignatureError):
        verify_signature(SECRET, "v1=abc", BODY)


def test_backoff_doubles() -> None:
    with override_settings(WEBHOOK_RETRY_BASE_SECONDS=30):
        assert [retry_delay(n).total_seconds() for n in (1, 2, 3, 4)] == [30, 60, 120, 240]


pytestmark_db = pytest.mark.django_db


def _endpoint(receiver: Receiver, tenant: Any = None, **kwargs: Any) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(url=receiver.url, tenant=tenant, **kwargs)


@pytestmark_db
def test_a_delivery_reaches_a_real_receiver_signed(
    receiver: Receiver, django_capture_on_commit_callbacks: Any
) -> None:
    tenant = TenantFactory.create()
    endpoint = _endpoint(receiver, tenant)
    with django_capture_on_commit_callbacks(execute=True):
        publish_event("sla.alert.fired", tenant, {"rule": "page-1h"}, "evt-1")
    assert len(receiver.received) == 1
    headers, body = receiver.received[0]
    verify_signature(endpoint.secret, headers["Treemeter-Signature"], body, tolerance=60)
    assert headers["Treemeter-Event-Id"] == "evt-1"
    sent = json.loads(body)
    assert (sent["id"], sent["type"], sent["tenant"], sent["data"]) == (
        "evt-1",
        "sla.alert.fired",
        tenant.code,
        {"rule": "page-1h"},
    )
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == WebhookDelivery.Status.SUCCEEDED
    attempt = delivery.attempts.get()
    assert (attempt.number, attempt.status_code, attempt.response_snippet, attempt.error) == (
        1,
        200,
        "ok",
        "",
    )


@pytestmark_db
def test_500_then_200_records_two_attempts(
    receiver: Receiver, django_capture_on_commit_callbacks: Any
) -> None:
    receiver.answers = [500]
    _endpoint(receiver)
    with django_capture_on_commit_callbacks(execute=True):
        publish_event("ledger.sequence_gap", None, {"missing": 3}, "evt-2")
    attempts = list(WebhookDeliveryAttempt.objects.order_by("number"))
    assert [(a.number, a.status_code, a.response_snippet) for a in attempts] == [
        (1, 500, "boom"),
        (2, 200, "ok"),
    ]
    assert attempts[0].next_retry_at is not None and attempts[1].next_retry_at is None
    assert WebhookDelivery.objects.get().status == WebhookDelivery.Status.SUCCEEDED
    assert len(receiver.received) == 2
    assert receiver.received[0][1] == receiver.received[1][1]  # the same body on every attempt


@pytestmark_db
@override_settings(WEBHOOK_MAX_ATTEMPTS=3)
def test_gives_up_after_max_attempts_and_does_not_retry_4xx(
    receiver: Receiver, django_capture_on_commit_callbacks: Any
) -> None:
    receiver.answers = [503, 503, 503, 404]
    _endpoint(receiver)
    with django_capture_on_commit_callbacks(execute=True):
        publish_event("ledger.sequence_gap", None, {}, "evt-3")
        publish_event("ledger.sequence_gap", None, {}, "evt-4")
    first, second = (WebhookDelivery.objects.get(event__event_id=e) for e in ("evt-3", "evt-4"))
    assert (first.status, first.attempts.count()) == (WebhookDelivery.Status.FAILED, 3)
    assert (second.status, list(second.attempts.values_list("status_code", flat=True))) == (
        WebhookDelivery.Status.FAILED,
        [404],
    )


@pytestmark_db
def test_network_error_is_recorded_and_retried(django_capture_on_commit_callbacks: Any) -> None:
    WebhookEndpoint.objects.create(url="http://127.0.0.1:9/closed")  # discard port: connection refused
    with override_settings(WEBHOOK_MAX_ATTEMPTS=2), django_capture_on_commit_callbacks(execute=True):
        publish_event("ledger.sequence_gap", None, {}, "evt-5")
    attempts = list(WebhookDeliveryAttempt.objects.order_by("number"))
    assert [(a.number, a.status_code) for a in attempts] == [(1, None), (2, None)]
    assert all(a.error.startswith("ConnectError") for a in attempts)
    assert WebhookDelivery.objects.get().status == WebhookDelivery.Status.FAILED


@pytestmark_db
def test_same_event_id_is_delivered_once(receiver: Receiver, django_capture_on_commit_callbacks: Any) -> None:
    _endpoint(receiver)
    with django_capture_on_commit_callbacks(execute=True):
        first = publish_event("ledger.sequence_gap", None, {"n": 1}, "evt-6")
    with django_capture_on_commit_callbacks(execute=True):
        again = publish_event("ledger.sequence_gap", None, {"n": 2}, "evt-6")
    assert first.pk == again.pk and again.payload == {"n": 1}
    assert (WebhookEvent.objects.count(), WebhookDelivery.objects.count(), len(receiver.received)) == (
        1,
        1,
        1,
    )


@pytestmark_db
def test_tenant_endpoints_get_only_their_own_tenants_events(
    receiver: Receiver, django_capture_on_commit_callbacks: Any
) -> None:
    alpha, beta = TenantFactory.create(), TenantFactory.create()
    to_alpha, to_beta, platform = _endpoint(receiver, alpha), _endpoint(receiver, beta), _endpoint(receiver)
    only_gaps = _endpoint(receiver, alpha, event_types=["ledger.*"])
    inactive = _endpoint(receiver, alpha, active=False)
    with django_capture_on_commit_callbacks(execute=True):
        publish_event("sla.alert.fired", alpha, {}, "evt-a")
        publish_event("sla.alert.fired", beta, {}, "evt-b")
        publish_event("ledger.sequence_gap", None, {}, "evt-p")

    def got(endpoint: WebhookEndpoint) -> set[str]:
        return set(endpoint.deliveries.values_list("event__event_id", flat=True))

    assert got(to_alpha) == {"evt-a"}
    assert got(to_beta) == {"evt-b"}
    assert got(platform) == {"evt-a", "evt-b", "evt-p"}
    assert got(only_gaps) == set()  # tenant endpoints never receive platform-wide events
    assert got(inactive) == set()
    assert len(receiver.received) == 5


NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)
MINUTE = 60 * 10**9


@pytest.mark.django_db
@pytest.mark.usefixtures("clickhouse")
def test_an_sla_burn_rate_alert_goes_out_signed(
    receiver: Receiver, django_capture_on_commit_callbacks: Any
) -> None:
    contract = ContractFactory.create()
    make_policy(contract)  # availability 99.9 %
    endpoint = _endpoint(receiver, contract.tenant, event_types=["sla.alert.*"])
    _endpoint(receiver, TenantFactory.create())  # another tenant's endpoint hears nothing
    agent = signing_agent(contract)
    start_ns = int((NOW - timedelta(hours=1)).timestamp()) * 10**9
    store(records(agent, contract, 60, start_ns - 60 * MINUTE, MINUTE))
    store(records(agent, contract, 60, start_ns, MINUTE, status="error"))  # the last hour fails

    with django_capture_on_commit_callbacks(execute=True):
        assert evaluate_burn_rates(contract, now=NOW) == 4  # every rule fires (see tests/sla)
    assert len(receiver.received) == 4
    sent = []
    for headers, body in receiver.received:
        verify_signature(endpoint.secret, headers["Treemeter-Signature"], body, tolerance=60)
        sent.append(json.loads(body))
    assert {(s["type"], s["tenant"], s["data"]["contract"]) for s in sent} == {
        ("sla.alert.fired", contract.tenant.code, contract.code)
    }
    assert {s["data"]["rule"] for s in sent} == {"page-1h", "page-6h", "ticket-1d", "ticket-3d"}
    assert set(WebhookDelivery.objects.values_list("endpoint", "status")) == {(endpoint.pk, "succeeded")}
