"""POST /v1/purchases: an invoiced plan is active at once; a Checkout plan waits for Stripe's signed
webhook; Idempotency-Key replays; roles, bad input and the tenant boundary."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from billing.selectors import credit_balance
from catalog.models import PackagePlan, PlanPrice
from contracts.models import Contract, ContractPrice
from tests.api.conftest import STRIPE_SECRET, member_client, post_json, staff_client, token_client
from tests.billing.fake_stripe import FakeStripe, signed
from tests.factories import ComputePackageFactory, TenantFactory

pytestmark = pytest.mark.django_db


def plan(payment: str = "invoice", code: str = "pro", fee: str = "250.00") -> PackagePlan:
    package = ComputePackageFactory.create(code="review-contracts")
    row = PackagePlan.objects.create(
        package=package, code=code, name="Pro", currency="CNY", base_fee=Decimal(fee), payment=payment
    )
    PlanPrice.objects.create(
        plan=row, dimension="requests", unit_price=Decimal("0.05"), included_quantity=Decimal(1000)
    )
    PlanPrice.objects.create(
        plan=row,
        dimension="tokens_out",
        charge_model="graduated",
        properties={
            "tiers": [{"up_to": "1000000", "unit_price": "0.00002"}, {"up_to": None, "unit_price": "0.00001"}]
        },
    )
    return row


def buy(client: Client, body: dict[str, Any] | None = None, key: str | None = None) -> Any:
    headers = {} if key is None else {"Idempotency-Key": key}
    return post_json(
        client, "/v1/purchases", body or {"package": "review-contracts", "plan": "pro"}, **headers
    )


def stripe_event(client: Client, event: dict[str, Any]) -> Any:
    payload = json.dumps(event).encode()
    return client.post(
        "/v1/stripe/webhook",
        data=payload,
        content_type="application/json",
        HTTP_STRIPE_SIGNATURE=signed(payload, STRIPE_SECRET),
    )


def test_an_invoiced_plan_makes_an_active_contract_with_the_plans_prices() -> None:
    plan()
    tenant = TenantFactory.create(code="acme")
    response = buy(token_client(tenant, "billing"))

    assert response.status_code == 201, response.content
    body = response.json()
    contract = Contract.objects.get()
    assert body["checkout_url"] is None
    assert (body["contract"]["code"], body["contract"]["status"], body["contract"]["plan"]) == (
        contract.code,
        "active",
        "pro",
    )
    assert contract.code.startswith("acme-review-contracts-")
    assert (contract.tenant, contract.currency, contract.base_fee, contract.status) == (
        tenant,
        "CNY",
        Decimal("250.00"),
        "active",
    )
    prices = {p.dimension: p for p in ContractPrice.objects.filter(contract=contract)}
    assert (prices["requests"].unit_price, prices["requests"].included_quantity) == (
        Decimal("0.05"),
        Decimal(1000),
    )
    assert prices["tokens_out"].charge_model == "graduated"
    assert prices["tokens_out"].properties["tiers"][1] == {"up_to": None, "unit_price": "0.00001"}
    assert body["contract"]["quotas"][0] == {
        "dimension": "requests",
        "charge_model": "per_unit",
        "unit_price": "0.05000000",
        "included": "1000.000000",
        "used": "0.000000",
        "left": "1000.000000",
    }


def test_a_checkout_plan_waits_for_the_signed_stripe_webhook(stripe_api: FakeStripe) -> None:
    plan("checkout")
    tenant = TenantFactory.create(code="acme")
    client = member_client(tenant, "billing")

    body = buy(client).json()

    contract = Contract.objects.get()
    assert (body["contract"]["status"], contract.status) == ("pending_payment", "pending_payment")
    session = stripe_api.objects[contract.checkout_session_id]
    assert body["checkout_url"] == session["url"] == f"{stripe_api.url}/pay/{contract.checkout_session_id}"
    assert (session["amount_total"], session["currency"], session["client_reference_id"]) == (
        25000,
        "cny",
        contract.code,
    )
    assert session["metadata"] == {"contract": contract.code, "tenant": "acme"}
    checkout_request = [r for r in stripe_api.requests if r[1] == "/v1/checkout/sessions"]
    assert [r[3] for r in checkout_request] == [f"checkout-{contract.code}"]
    # Not served while unpaid: no inference key can be issued for it.
    refused = post_json(token_client(tenant, "developer"), "/v1/keys", {"contract": contract.code})
    assert (refused.status_code, refused.json()["code"]) == (400, "contract_not_active")
    assert list(Contract.objects.billable()) == []

    event = stripe_api.pay_checkout(contract.checkout_session_id, "evt_paid_1")
    first, again = stripe_event(Client(), event), stripe_event(Client(), event)

    assert (first.status_code, first.json()["duplicate"], again.json()["duplicate"]) == (200, False, True)
    contract.refresh_from_db()
    assert contract.status == "active"
    assert credit_balance(contract.pk) == Decimal("250.00")  # the base fee, paid ahead, once
    assert list(Contract.objects.billable()) == [contract]


def test_an_unpaid_checkout_session_activates_nothing(stripe_api: FakeStripe) -> None:
    plan("checkout")
    buy(member_client(TenantFactory.create(), "owner"))
    contract = Contract.objects.get()
    event = stripe_api.pay_checkout(contract.checkout_session_id, "evt_unpaid")
    event["data"]["object"]["payment_status"] = "unpaid"  # e.g. a bank transfer still on its way
    assert stripe_event(Client(), event).status_code == 200
    contract.refresh_from_db()
    assert (contract.status, credit_balance(contract.pk)) == ("pending_payment", Decimal("0.00"))


def test_an_expired_checkout_session_cancels_the_contract(stripe_api: FakeStripe) -> None:
    plan("checkout")
    buy(member_client(TenantFactory.create(), "owner"))
    contract = Contract.objects.get()
    event = {
        "id": "evt_expired",
        "object": "event",
        "type": "checkout.session.expired",
        "data": {"object": {**stripe_api.objects[contract.checkout_session_id], "status": "expired"}},
    }
    assert stripe_event(Client(), event).status_code == 200
    contract.refresh_from_db()
    assert (contract.status, contract.ends_at is not None) == ("cancelled", True)
    assert list(Contract.objects.billable()) == []
    late = stripe_api.pay_checkout(contract.checkout_session_id, "evt_late_payment")
    assert stripe_event(Client(), late).status_code == 200  # a cancelled contract stays cancelled
    contract.refresh_from_db()
    assert (contract.status, credit_balance(contract.pk)) == ("cancelled", Decimal("0.00"))


def test_a_stripe_outage_leaves_no_contract(stripe_api: FakeStripe) -> None:
    plan("checkout")
    stripe_api.fail_next = 5
    response = buy(member_client(TenantFactory.create(), "owner"))
    assert (response.status_code, response.json()["code"]) == (502, "payment_provider_unavailable")
    assert Contract.objects.count() == 0


def test_the_idempotency_key_replays_the_same_contract_and_refuses_another_body() -> None:
    plan()
    client = token_client(TenantFactory.create(), "owner")
    first = buy(client, key="buy-1")
    again = buy(client, key="buy-1")
    other = buy(
        client,
        {"package": "review-contracts", "plan": "pro", "starts_at": "2099-01-01T00:00:00Z"},
        key="buy-1",
    )

    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json()["contract"]["code"] == first.json()["contract"]["code"]
    assert again["Idempotent-Replayed"] == "true"
    assert Contract.objects.count() == 1
    assert (other.status_code, other.json()["code"]) == (422, "idempotency_key_reused")


@pytest.mark.parametrize("role", ["read_only", "developer"])
def test_only_owners_and_billing_may_buy(role: str) -> None:
    plan()
    response = buy(token_client(TenantFactory.create(), role))
    assert (response.status_code, response.json()["code"]) == (403, "forbidden_role")
    assert Contract.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"package": "review-contracts", "plan": "gold"}, 404, "plan_not_found"),
        ({"package": "other", "plan": "pro"}, 404, "plan_not_found"),
        ({"package": "review-contracts"}, 400, "invalid_request"),
        ({"package": "review-contracts", "plan": "pro", "starts_at": "yesterday"}, 400, "invalid_request"),
    ],
)
def test_bad_purchases_answer_4xx(body: dict[str, Any], status: int, code: str) -> None:
    plan()
    response = buy(member_client(TenantFactory.create()), body)
    assert (response.status_code, response.json()["code"]) == (status, code)


def test_a_start_in_the_past_and_an_inactive_plan_are_refused() -> None:
    row = plan()
    client = member_client(TenantFactory.create())
    past = (timezone.now() - timedelta(days=2)).isoformat()
    response = buy(client, {"package": "review-contracts", "plan": "pro", "starts_at": past})
    assert (response.status_code, response.json()["code"]) == (400, "invalid_start")
    row.active = False
    row.save()
    assert buy(client).json()["code"] == "plan_not_found"


def test_staff_cannot_buy_for_nobody() -> None:
    plan()
    response = buy(staff_client())
    assert (response.status_code, response.json()["code"]) == (400, "tenant_required")
