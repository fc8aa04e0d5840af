"""The outcome API: customers declare, confirm and revoke their own tenant's outcomes only."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import Membership
from billing.models import Outcome
from contracts.models import Contract
from tests.factories import ContractFactory

pytestmark = pytest.mark.django_db


def customer_of(contract: Contract, name: str) -> Client:
    user = get_user_model().objects.create_user(name)
    Membership.objects.create(user=user, tenant=contract.tenant)
    client = Client()
    client.force_login(user)
    return client


def declare(client: Client, contract: str, ref: str = "case-1", **extra: Any) -> Any:
    body = {"contract": contract, "ref": ref, "type": "matched_patient", "value": "2000.00", **extra}
    return client.post("/v1/outcomes", data=body, content_type="application/json")


def test_a_customer_declares_and_confirms_its_outcome() -> None:
    contract = ContractFactory.create(code="acme-health")
    client = customer_of(contract, "alice")

    first = declare(client, "acme-health")
    again = declare(client, "acme-health", value="1.00")  # the same ref: the first declaration
    assert (first.status_code, again.status_code) == (201, 201)
    assert first.json()["status"] == "pending" and again.json()["value"] == "2000.000000"

    confirmed = client.generic(
        "POST", f"/v1/outcomes/{first.json()['id']}/confirm"
    )  # no body, as curl -X POST
    assert (confirmed.status_code, confirmed.json()["status"], confirmed.json()["decided_by"]) == (
        200,
        "confirmed",
        "customer",
    )
    revoked = client.post(
        f"/v1/outcomes/{first.json()['id']}/revoke", data={"reason": "x"}, content_type="application/json"
    )
    assert revoked.json()["status"] == "revoked"
    refused = client.post(f"/v1/outcomes/{first.json()['id']}/confirm", content_type="application/json")
    assert (refused.status_code, refused.json()["code"]) == (409, "outcome_revoked")


def test_tenants_never_see_or_decide_each_other_s_outcomes() -> None:
    mine = ContractFactory.create(code="acme-health")
    theirs = ContractFactory.create(code="other-health")
    alice, bob = customer_of(mine, "alice"), customer_of(theirs, "bob")
    outcome_id = declare(alice, "acme-health").json()["id"]

    assert declare(bob, "acme-health").json()["code"] == "contract_not_found"
    for action in ("confirm", "revoke"):
        response = bob.post(f"/v1/outcomes/{outcome_id}/{action}")
        assert (response.status_code, response.json()["code"]) == (404, "outcome_not_found")
    assert Outcome.objects.get(pk=outcome_id).status == "pending"


def test_bad_outcome_requests() -> None:
    contract = ContractFactory.create(code="acme-health")
    client = customer_of(contract, "alice")
    assert declare(client, "acme-health", value="-5").json()["code"] == "negative_price"
    assert declare(client, "acme-health", currency="USD").json()["code"] == "currency_mismatch"
    assert declare(client, "acme-health", value="abc").json()["code"] == "invalid_request"
    stranger = Client()
    stranger.force_login(get_user_model().objects.create_user("nobody"))
    assert declare(stranger, "acme-health").json()["code"] == "no_tenant"
    assert declare(Client(), "acme-health").status_code == 401
