"""/v1/webhooks/…: a tenant's endpoints (secret shown on create), their delivery logs with every attempt
made to a real HTTP receiver, and replay."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import member_client, post_json, staff_client, token_client
from tests.factories import TenantFactory
from tests.webhooks.conftest import Receiver, receiver  # noqa: F401 (fixture)
from webhooks.models import WebhookDelivery, WebhookEndpoint
from webhooks.services import publish_event
from webhooks.signing import verify_signature

pytestmark = pytest.mark.django_db


def test_endpoint_create_read_update_delete() -> None:
    tenant = TenantFactory.create(code="acme")
    client = token_client(tenant, "developer")

    made = post_json(
        client, "/v1/webhooks/endpoints", {"url": "https://hooks.acme.test/t", "event_types": ["invoice.*"]}
    )

    assert made.status_code == 201, made.content
    body = made.json()
    endpoint = WebhookEndpoint.objects.get()
    assert body["secret"] == endpoint.secret and body["secret"].startswith("whsec_")
    assert (endpoint.tenant, endpoint.url, endpoint.event_types) == (
        tenant,
        "https://hooks.acme.test/t",
        ["invoice.*"],
    )
    url = f"/v1/webhooks/endpoints/{endpoint.pk}"
    assert "secret" not in client.get(url).json()
    assert [e["id"] for e in client.get("/v1/webhooks/endpoints").json()["results"]] == [endpoint.pk]

    patched = client.patch(
        url, data={"active": False, "event_types": ["quota.exhausted"]}, content_type="application/json"
    )
    assert (patched.status_code, patched.json()["active"], patched.json()["event_types"]) == (
        200,
        False,
        ["quota.exhausted"],
    )
    endpoint.refresh_from_db()
    assert (endpoint.url, endpoint.active, endpoint.secret) == (
        "https://hooks.acme.test/t",
        False,
        body["secret"],
    )
    assert client.delete(url).status_code == 204
    assert WebhookEndpoint.objects.count() == 0


@pytest.mark.parametrize(
    "body",
    [
        {"url": "not a url"},
        {"url": "https://x.test", "event_types": "invoice.*"},
        {"url": "https://x.test", "event_types": [" "]},
    ],
)
def test_bad_endpoints_are_400(body: dict[str, Any]) -> None:
    response = post_json(member_client(TenantFactory.create(), "developer"), "/v1/webhooks/endpoints", body)
    assert (response.status_code, response.json()["code"]) == (400, "invalid_request")
    assert WebhookEndpoint.objects.count() == 0


@pytest.mark.parametrize("role", ["billing", "read_only"])
def test_billing_and_read_only_cannot_manage_endpoints(role: str) -> None:
    tenant = TenantFactory.create()
    endpoint = WebhookEndpoint.objects.create(tenant=tenant, url="https://x.test/h")
    client = token_client(tenant, role)
    assert client.get(f"/v1/webhooks/endpoints/{endpoint.pk}").status_code == 200
    for response in (
        post_json(client, "/v1/webhooks/endpoints", {"url": "https://y.test/h"}),
        client.patch(
            f"/v1/webhooks/endpoints/{endpoint.pk}", data={"active": False}, content_type="application/json"
        ),
        client.delete(f"/v1/webhooks/endpoints/{endpoint.pk}"),
    ):
        assert (response.status_code, response.json()["code"]) == (403, "forbidden_role")


def test_another_tenants_endpoints_and_deliveries_are_404() -> None:
    theirs = WebhookEndpoint.objects.create(tenant=TenantFactory.create(), url="https://x.test/h")
    platform_wide = WebhookEndpoint.objects.create(tenant=None, url="https://ops.test/h")
    mine = token_client(TenantFactory.create(), "developer")
    assert mine.get("/v1/webhooks/endpoints").json()["results"] == []
    for endpoint in (theirs, platform_wide):
        url = f"/v1/webhooks/endpoints/{endpoint.pk}"
        assert [
            mine.get(url).status_code,
            mine.patch(url, data={"active": False}, content_type="application/json").status_code,
            mine.delete(url).status_code,
            mine.get(f"{url}/deliveries").status_code,
        ] == [404, 404, 404, 404]
    assert WebhookEndpoint.objects.filter(active=True).count() == 2
    assert len(staff_client().get("/v1/webhooks/endpoints").json()["results"]) == 2


def test_deliveries_show_every_attempt_and_replay_sends_again(
    receiver: Receiver,  # noqa: F811
    django_capture_on_commit_callbacks: Any,
    settings: Any,
) -> None:
    settings.WEBHOOK_MAX_ATTEMPTS = 2
    tenant = TenantFactory.create(code="acme")
    client = member_client(tenant, "developer")
    endpoint_id = post_json(client, "/v1/webhooks/endpoints", {"url": receiver.url}).json()["id"]
    receiver.answers = [503, 500]  # both tries fail: the delivery fails
    with django_capture_on_commit_callbacks(execute=True):
        publish_event("invoice.paid", tenant, {"invoice": 7}, "invoice.paid:7")

    deliveries = client.get(f"/v1/webhooks/endpoints/{endpoint_id}/deliveries").json()["results"]
    assert len(deliveries) == 1
    delivery = deliveries[0]
    assert (delivery["event_id"], delivery["event_type"], delivery["status"]) == (
        "invoice.paid:7",
        "invoice.paid",
        "failed",
    )
    assert [(a["number"], a["status_code"], a["response_snippet"]) for a in delivery["attempts"]] == [
        (1, 503, "boom"),
        (2, 500, "boom"),
    ]
    assert (
        client.get(f"/v1/webhooks/endpoints/{endpoint_id}/deliveries?status=succeeded").json()["results"]
        == []
    )

    refused = post_json(token_client(tenant, "billing"), f"/v1/webhooks/deliveries/{delivery['id']}/replay")
    assert (refused.status_code, refused.json()["code"]) == (403, "forbidden_role")
    stranger = post_json(
        token_client(TenantFactory.create(), "developer"), f"/v1/webhooks/deliveries/{delivery['id']}/replay"
    )
    assert stranger.status_code == 404
    with django_capture_on_commit_callbacks(execute=True):
        replayed = post_json(client, f"/v1/webhooks/deliveries/{delivery['id']}/replay")

    assert replayed.status_code == 202
    assert WebhookDelivery.objects.get().status == "succeeded"
    after = client.get(f"/v1/webhooks/endpoints/{endpoint_id}/deliveries").json()["results"][0]
    assert [(a["number"], a["status_code"]) for a in after["attempts"]] == [(1, 503), (2, 500), (3, 200)]
    bodies = [body for _, body in receiver.received]
    assert len(bodies) == 3 and bodies[0] == bodies[2]  # the same event body, signed afresh
    headers, body = receiver.received[2]
    verify_signature(WebhookEndpoint.objects.get().secret, headers["Treemeter-Signature"], body)


def test_a_delivery_to_an_inactive_endpoint_is_not_replayed(django_capture_on_commit_callbacks: Any) -> None:
    tenant = TenantFactory.create()
    endpoint = WebhookEndpoint.objects.create(tenant=tenant, url="http://127.0.0.1:9/h")
    with django_capture_on_commit_callbacks(execute=False):
        publish_event("quota.exhausted", tenant, {}, "q-1")
    endpoint.active = False
    endpoint.save()
    delivery = WebhookDelivery.objects.get()
    response = post_json(member_client(tenant, "owner"), f"/v1/webhooks/deliveries/{delivery.pk}/replay")
    assert (response.status_code, response.json()["code"]) == (409, "endpoint_inactive")
