"""Buying a plan from the catalogue (billing.purchases.purchase_package), and replaying a webhook
delivery to a real receiver (webhooks.services.replay_delivery)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.models import Role, Tenant
from catalog.models import PackagePlan, PlanPrice
from contracts.models import Contract
from tests.billing.fake_stripe import fake_stripe
from tests.factories import ComputePackageFactory, TenantFactory
from tests.frontend.support import member
from tests.webhooks.conftest import Receiver
from webhooks.models import WebhookDelivery, WebhookDeliveryAttempt, WebhookEndpoint, WebhookEvent

pytestmark = pytest.mark.django_db


def _plan(payment: str = PackagePlan.Payment.INVOICE) -> PackagePlan:
    package = ComputePackageFactory.create(code="contract-review", name="Contract review")
    plan = PackagePlan.objects.create(
        package=package,
        code="standard",
        name="Standard",
        currency="CNY",
        base_fee=Decimal("1999.00"),
        payment=payment,
    )
    PlanPrice.objects.create(
        plan=plan, dimension="requests", unit_price=Decimal("0.05"), included_quantity=Decimal(1000)
    )
    return plan


@pytest.mark.usefixtures("clickhouse")  # the contract page measures the quotas' usage
def test_the_catalogue_shows_plans_and_buying_an_invoiced_plan_makes_an_active_contract() -> None:
    _plan()
    tenant = TenantFactory.create()
    buyer = member(tenant, Role.BILLING)
    page = buyer.get(reverse("portal-packages")).content.decode()
    assert 'data-testid="buy-contract-review-standard"' in page
    assert "CNY 1,999.00" in page
    chinese = member(tenant, Role.OWNER, language="zh-hans").get(reverse("portal-packages")).content.decode()
    assert "凭发票付款" in chinese and "购买" in chinese

    bought = buyer.post(reverse("portal-buy"), {"package": "contract-review", "plan": "standard"})
    contract = Contract.objects.get(tenant=tenant)
    assert (bought.status_code, bought["Location"]) == (302, f"/contracts/{contract.code}")
    assert (contract.status, contract.package.code, contract.currency) == ("active", "contract-review", "CNY")
    [price] = contract.prices.all()
    assert (price.dimension, price.unit_price, price.included_quantity) == ("requests", Decimal("0.05"), 1000)
    shown = buyer.get(bought["Location"]).content.decode()
    assert f"Contract {contract.code} is active." in shown


def test_buying_a_checkout_plan_goes_to_stripe_checkout(settings: Any) -> None:
    _plan(PackagePlan.Payment.CHECKOUT)
    tenant = TenantFactory.create()
    with fake_stripe() as stripe:
        settings.STRIPE_API_KEY, settings.STRIPE_API_BASE = "sk_test_fake", stripe.url
        bought = member(tenant, Role.OWNER).post(
            reverse("portal-buy"), {"package": "contract-review", "plan": "standard"}
        )
    contract = Contract.objects.get(tenant=tenant)
    assert (bought.status_code, bought["Location"]) == (
        302,
        f"{stripe.url}/pay/{contract.checkout_session_id}",
    )
    assert contract.status == "pending_payment"


def test_an_unknown_plan_comes_back_as_a_message_and_no_contract() -> None:
    _plan()
    buyer = member(TenantFactory.create(), Role.OWNER)
    answer = buyer.post(
        reverse("portal-buy"), {"package": "contract-review", "plan": "platinum"}, follow=True
    )
    assert answer.redirect_chain == [("/packages/", 302)]
    assert (
        "No purchasable plan &#x27;platinum&#x27; of package &#x27;contract-review&#x27;."
        in answer.content.decode()
    )
    assert Contract.objects.count() == 0


def test_developers_cannot_buy() -> None:
    _plan()
    developer = member(TenantFactory.create(), Role.DEVELOPER)
    assert 'data-testid="buy-' not in developer.get(reverse("portal-packages")).content.decode()
    response = developer.post(reverse("portal-buy"), {"package": "contract-review", "plan": "standard"})
    assert response.status_code == 403 and Contract.objects.count() == 0


def _failed_delivery(url: str, **endpoint: Any) -> tuple[WebhookDelivery, Tenant]:
    tenant = TenantFactory.create()
    hook = WebhookEndpoint.objects.create(tenant=tenant, url=url, **endpoint)
    event = WebhookEvent.objects.create(
        event_id="evt-1", type="invoice.finalized", tenant=tenant, payload={"invoice": 1}
    )
    delivery = WebhookDelivery.objects.create(
        event=event, endpoint=hook, status=WebhookDelivery.Status.FAILED
    )
    WebhookDeliveryAttempt.objects.create(
        delivery=delivery,
        number=1,
        attempted_at=timezone.now() - timedelta(minutes=5),
        status_code=500,
        response_snippet="boom",
        duration_ms=12,
    )
    return delivery, tenant


def test_replaying_a_failed_delivery_sends_it_again(
    receiver: Receiver, django_capture_on_commit_callbacks: Any
) -> None:
    delivery, tenant = _failed_delivery(receiver.url)
    developer = member(tenant, Role.DEVELOPER)
    log = developer.get(reverse("portal-webhook", kwargs={"pk": delivery.endpoint_id})).content.decode()
    assert f'data-testid="replay-{delivery.pk}"' in log and "1 attempt" in log
    url = reverse("portal-delivery-replay", kwargs={"pk": delivery.pk})
    with django_capture_on_commit_callbacks(execute=True):
        row = developer.post(url, HTTP_HX_REQUEST="true")
    assert row.status_code == 200
    assert row.content.decode().lstrip().startswith(f'<tr id="delivery-{delivery.pk}"')
    assert f'data-testid="delivery-status-{delivery.pk}">Pending<' in row.content.decode()
    delivery.refresh_from_db()
    assert delivery.status == "succeeded"
    assert [(a.number, a.status_code) for a in delivery.attempts.all()] == [(1, 500), (2, 200)]
    assert len(receiver.received) == 1
    log = developer.get(reverse("portal-webhook", kwargs={"pk": delivery.endpoint_id})).content.decode()
    assert "2 attempts" in log and f'data-testid="delivery-status-{delivery.pk}">Succeeded<' in log


def test_a_delivery_to_an_inactive_endpoint_is_not_replayed(receiver: Receiver) -> None:
    delivery, tenant = _failed_delivery(receiver.url, active=False)
    owner = member(tenant, Role.OWNER, language="zh-hans")
    row = owner.post(reverse("portal-delivery-replay", kwargs={"pk": delivery.pk}), HTTP_HX_REQUEST="true")
    assert row.status_code == 200
    assert (
        'data-testid="replay-error">The endpoint is inactive; activate it to replay.<' in row.content.decode()
    )
    delivery.refresh_from_db()
    assert delivery.status == "failed" and delivery.attempts.count() == 1
    assert (
        member(tenant, Role.BILLING)
        .post(reverse("portal-delivery-replay", kwargs={"pk": delivery.pk}))
        .status_code
        == 403
    )


def test_a_developer_adds_an_endpoint_and_sees_its_secret_once() -> None:
    tenant = TenantFactory.create()
    developer = member(tenant, Role.DEVELOPER)
    response = developer.post(
        reverse("portal-webhooks"),
        {"url": "https://hooks.example/tm", "event_types": "invoice.*, dispute.updated"},
    )
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    endpoint = WebhookEndpoint.objects.get()
    assert (endpoint.tenant, endpoint.url, endpoint.event_types) == (
        tenant,
        "https://hooks.example/tm",
        ["invoice.*", "dispute.updated"],
    )
    assert f'data-testid="new-endpoint-secret">{endpoint.secret}<' in response.content.decode()
    again = developer.get(reverse("portal-webhooks")).content.decode()
    assert endpoint.secret not in again and "https://hooks.example/tm" in again
    bad = developer.post(reverse("portal-webhooks"), {"url": "not a url"})
    assert bad.status_code == 400 and WebhookEndpoint.objects.count() == 1
    reader = member(tenant, Role.READ_ONLY)
    assert 'data-testid="webhook-form"' not in reader.get(reverse("portal-webhooks")).content.decode()
    assert reader.post(reverse("portal-webhooks"), {"url": "https://x.example/"}).status_code == 403
    assert WebhookEndpoint.objects.count() == 1
