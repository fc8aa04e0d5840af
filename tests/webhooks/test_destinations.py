"""Webhooks go to public addresses only (SSRF): refused when an endpoint is saved and at delivery."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

from accounts.access import Principal
from accounts.models import Role
from tests.factories import MembershipFactory, TenantFactory
from tests.webhooks.conftest import Receiver
from webhooks.delivery import attempt_delivery
from webhooks.destinations import UnsafeDestination, resolve_destination
from webhooks.models import WebhookDelivery, WebhookEndpoint
from webhooks.services import create_endpoint, publish_event

pytestmark = pytest.mark.django_db


@override_settings(WEBHOOK_ALLOW_PRIVATE_URLS=False)
@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "ftp://example.com/hook",
        "http://no-such-host.invalid/hook",
    ],
)
def test_private_and_odd_urls_are_refused(url: str) -> None:
    with pytest.raises(UnsafeDestination) as refused:
        resolve_destination(url)
    assert refused.value.code == "unsafe_webhook_url"


@override_settings(WEBHOOK_ALLOW_PRIVATE_URLS=False)
def test_a_public_address_is_pinned_with_its_host_kept() -> None:
    destination = resolve_destination("https://93.184.215.14:8443/hooks?x=1")
    assert (destination.url, destination.host, destination.host_header) == (
        "https://93.184.215.14:8443/hooks?x=1",
        "93.184.215.14",
        "93.184.215.14:8443",
    )


@override_settings(WEBHOOK_ALLOW_PRIVATE_URLS=False)
def test_the_api_refuses_a_loopback_endpoint(client: Client) -> None:
    member = MembershipFactory.create(role=Role.DEVELOPER)
    client.force_login(member.user)
    response = client.post(
        "/v1/webhooks/endpoints",
        {"url": "http://127.0.0.1:9000/hook", "event_types": []},
        content_type="application/json",
    )
    assert response.status_code == 400 and response.json()["code"] == "unsafe_webhook_url"
    assert not WebhookEndpoint.objects.exists()


@override_settings(WEBHOOK_ALLOW_PRIVATE_URLS=False)
def test_a_name_that_does_not_resolve_yet_is_saved_and_retried_at_delivery() -> None:
    tenant = TenantFactory.create()
    principal = Principal(tenant=tenant, role=Role.OWNER, user_id=None)
    endpoint = create_endpoint(principal, url="https://hooks.example.invalid/t", event_types=[])
    publish_event("invoice.paid", tenant, {"invoice": 3}, "invoice.paid:3")
    delivery = attempt_delivery(WebhookDelivery.objects.get(endpoint=endpoint).pk)
    assert delivery.status == WebhookDelivery.Status.PENDING and delivery.next_retry_at is not None
    assert "does not resolve" in delivery.attempts.get().error


def test_a_delivery_to_a_private_address_fails_at_once_and_sends_nothing(receiver: Receiver) -> None:
    tenant = TenantFactory.create()
    WebhookEndpoint.objects.create(tenant=tenant, url=receiver.url)  # saved while private URLs were allowed
    publish_event("invoice.paid", tenant, {"invoice": 1}, "invoice.paid:1")
    delivery = WebhookDelivery.objects.get()
    with override_settings(WEBHOOK_ALLOW_PRIVATE_URLS=False):
        delivery = attempt_delivery(delivery.pk)
    attempt = delivery.attempts.get()
    assert delivery.status == WebhookDelivery.Status.FAILED and receiver.received == []
    assert attempt.status_code is None and attempt.error.startswith("refused: The host '127.0.0.1'")


def test_an_allowed_delivery_keeps_the_host_header(receiver: Receiver) -> None:
    tenant = TenantFactory.create()
    WebhookEndpoint.objects.create(tenant=tenant, url=receiver.url.replace("127.0.0.1", "localhost"))
    publish_event("invoice.paid", tenant, {"invoice": 2}, "invoice.paid:2")
    delivery = attempt_delivery(WebhookDelivery.objects.get().pk)
    assert delivery.status == WebhookDelivery.Status.SUCCEEDED
    ((headers, _body),) = receiver.received
    assert headers["Host"] == "localhost:" + receiver.url.split(":")[2].split("/")[0]
