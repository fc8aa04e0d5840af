"""The staff API for contract terms: clear 400s for terms that cannot be billed, 403 for non-staff."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from contracts.models import Contract, ContractPrice
from tests.factories import ContractFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(client: Client) -> Client:
    client.force_login(get_user_model().objects.create_user("ops", is_staff=True))
    return client


@pytest.fixture
def contract() -> Contract:
    return ContractFactory.create(code="acme-2026")


def put(client: Client, url: str, body: dict[str, Any]) -> Any:
    return client.put(url, data=json.dumps(body), content_type="application/json")


def test_a_charge_is_set_and_the_same_put_again_changes_nothing(staff: Client, contract: Contract) -> None:
    body = {
        "charge_model": "graduated",
        "included_quantity": "1000",
        "properties": {"tiers": [{"up_to": 5000, "unit_price": "0.001"}, {"unit_price": "0.0005"}]},
    }
    for _ in range(2):
        response = put(staff, "/v1/contracts/acme-2026/charges/tokens_in", body)
        assert response.status_code == 200, response.content
    price = ContractPrice.objects.get(contract=contract)
    assert (price.charge_model, price.included_quantity, price.properties) == (
        "graduated",
        Decimal(1000),
        body["properties"],
    )
    response = put(staff, "/v1/contracts/acme-2026/charges/requests", {"unit_price": "0.0000015"})
    assert response.json()["unit_price"] == "0.0000015"  # sub-cent prices are kept
    stored = ContractPrice.objects.get(contract=contract, dimension="requests")
    assert stored.unit_price == Decimal("0.0000015")


@pytest.mark.parametrize(
    ("url", "body", "code", "details"),
    [
        ("charges/requests", {"unit_price": "-0.01"}, "negative_price", {"property": "unit_price"}),
        ("charges/requests", {"charge_model": "per_unit"}, "missing_property", {"property": "unit_price"}),
        (
            "charges/requests",
            {"unit_price": "1", "included_quantity": "-5"},
            "negative_price",
            {"property": "included_quantity"},
        ),
        (
            "charges/tokens_in",
            {
                "charge_model": "volume",
                "properties": {
                    "tiers": [
                        {"up_to": 100, "unit_price": 1},
                        {"up_to": 100, "unit_price": 1},
                        {"unit_price": 1},
                    ]
                },
            },
            "overlapping_tiers",
            {"tier": 1},
        ),
        ("charges/gpu_hours", {"unit_price": "1"}, "unknown_dimension", {"dimension": "gpu_hours"}),
        (
            "charges/requests",
            {"unit_price": "1", "currency": "USD"},
            "currency_mismatch",
            {"contract_currency": "CNY", "currency": "USD"},
        ),
        (
            "charges/requests",
            {"charge_model": "flat", "unit_price": "1"},
            "unknown_charge_model",
            {"kind": "flat"},
        ),
        (
            "metrics/weighted",
            {"name": "W", "expression": "distinct_experts * hops * (1 - cache_hit_ratio"},
            "invalid_expression",
            {"position": 46},
        ),
        (
            "metrics/weighted",
            {"name": "W", "expression": "tokens_in; DROP TABLE usage_records"},
            "invalid_expression",
            {"position": 9},
        ),
        (
            "metrics/requests",
            {"name": "W", "expression": "1"},
            "metric_shadows_dimension",
            {"code": "requests"},
        ),
    ],
)
def test_terms_that_cannot_be_billed_get_a_400_naming_the_problem(
    staff: Client, contract: Contract, url: str, body: dict[str, Any], code: str, details: dict[str, Any]
) -> None:
    response = put(staff, f"/v1/contracts/acme-2026/{url}", body)
    assert response.status_code == 400
    assert response.json()["code"] == code and response.json()["details"] == details
    assert response.json()["message"]
    assert not ContractPrice.objects.filter(contract=contract).exists()


def test_a_custom_metric_can_then_be_priced(staff: Client, contract: Contract) -> None:
    body = {"name": "Weighted experts", "expression": "distinct_experts * hops * (1 - cache_hit_ratio)"}
    assert put(staff, "/v1/contracts/acme-2026/metrics/weighted", body).status_code == 200
    response = put(staff, "/v1/contracts/acme-2026/charges/weighted", {"unit_price": "0.1"})
    assert response.status_code == 200, response.content


def test_credits_are_granted_once_per_reference_in_the_contract_currency(
    staff: Client, contract: Contract
) -> None:
    url = "/v1/contracts/acme-2026/credits"
    body = {"amount": "500.00", "currency": "CNY", "reference": "po-1"}
    first = staff.post(url, data=body, content_type="application/json")
    again = staff.post(url, data=body, content_type="application/json")
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json()["balance"] == "500.00"
    wrong = staff.post(
        url, data={**body, "currency": "USD", "reference": "po-2"}, content_type="application/json"
    )
    assert (wrong.status_code, wrong.json()["code"]) == (400, "currency_mismatch")
    negative = staff.post(
        url, data={**body, "amount": "-1", "reference": "po-3"}, content_type="application/json"
    )
    assert (negative.status_code, negative.json()["code"]) == (400, "invalid_amount")


def test_unknown_contracts_are_404(staff: Client) -> None:
    response = put(staff, "/v1/contracts/nope/charges/requests", {"unit_price": "1"})
    assert (response.status_code, response.json()["code"]) == (404, "contract_not_found")


def test_tenants_and_anonymous_callers_cannot_change_terms(client: Client, contract: Contract) -> None:
    assert put(client, "/v1/contracts/acme-2026/charges/requests", {"unit_price": "0"}).status_code == 401
    client.force_login(get_user_model().objects.create_user("tenant-user"))
    assert put(client, "/v1/contracts/acme-2026/charges/requests", {"unit_price": "0"}).status_code == 403
    assert client.post("/v1/contracts/acme-2026/credits", data={}).status_code == 403
    assert not ContractPrice.objects.filter(contract=contract).exists()


def test_the_admin_form_checks_charges_like_the_api(contract: Contract) -> None:
    from django.core.exceptions import ValidationError

    price = ContractPrice(
        contract=contract,
        dimension="tokens_in",
        charge_model="graduated",
        properties={"tiers": [{"up_to": 10, "unit_price": 1}]},
    )
    with pytest.raises(ValidationError, match="unbounded_last_tier"):
        price.full_clean()
    ContractPrice(contract=contract, dimension="requests", unit_price=Decimal("0.05")).full_clean()


def patch(client: Client, body: dict[str, Any]) -> Any:
    return client.patch(
        "/v1/contracts/acme-2026/terms", data=json.dumps(body), content_type="application/json"
    )


def test_period_terms_are_patched(staff: Client, contract: Contract) -> None:
    body = {
        "base_fee": "1000",
        "base_fee_timing": "advance",
        "minimum_commitment": "5000.00",
        "tax_rate": "0.06",
        "tax_inclusive": True,
        "grace_days": 3,
        "credit_order": ["usage"],
        "outcome_window_hours": 72,
        "outcome_rule": "outcome_f1 >= 0.92 and p99_latency_ms <= 300",
        "currency": "CNY",
    }
    response = patch(staff, body)
    assert response.status_code == 200, response.content
    contract.refresh_from_db()
    assert (contract.base_fee, contract.base_fee_timing, contract.tax_rate, contract.grace_days) == (
        Decimal(1000),
        "advance",
        Decimal("0.06"),
        3,
    )
    assert response.json()["outcome_rule"] == body["outcome_rule"]


def test_the_billing_pause_for_customer_dependencies_is_a_term(staff: Client, contract: Contract) -> None:
    assert patch(staff, {"pause_billing_on_customer_dependency": "yes"}).json()["code"] == "invalid_term"
    response = patch(staff, {"pause_billing_on_customer_dependency": True})
    assert response.status_code == 200, response.content
    assert response.json()["pause_billing_on_customer_dependency"] is True
    contract.refresh_from_db()
    assert contract.pause_billing_on_customer_dependency is True


@pytest.mark.parametrize(
    ("body", "code", "details"),
    [
        ({"base_fee": "-1"}, "negative_price", {"property": "base_fee"}),
        ({"tax_rate": "0.123456"}, "invalid_term", {"term": "tax_rate"}),
        ({"tax_rate": "1.5"}, "invalid_term", {"term": "tax_rate"}),
        ({"minimum_commitment": "1e30"}, "invalid_term", {"term": "minimum_commitment"}),
        ({"grace_days": -1}, "invalid_term", {"term": "grace_days"}),
        ({"tax_inclusive": "yes"}, "invalid_term", {"term": "tax_inclusive"}),
        ({"base_fee_timing": "weekly"}, "invalid_term", {"term": "base_fee_timing"}),
        ({"credit_order": ["tax"]}, "invalid_term", {"term": "credit_order"}),
        ({"outcome_rule": "outcome_f1 >> 1"}, "invalid_expression", {"position": 12}),
        (
            {"currency": "USD", "base_fee": "1"},
            "currency_mismatch",
            {"contract_currency": "CNY", "currency": "USD"},
        ),
        ({"code": "x"}, "unknown_term", {"term": "code"}),
        ({"base_fee": "5", "grace_days": "x"}, "invalid_term", {"term": "grace_days"}),  # nothing is written
    ],
)
def test_bad_period_terms_get_a_400_and_change_nothing(
    staff: Client, contract: Contract, body: dict[str, Any], code: str, details: dict[str, Any]
) -> None:
    response = patch(staff, body)
    assert (response.status_code, response.json()["code"], response.json()["details"]) == (400, code, details)
    contract.refresh_from_db()
    assert contract.base_fee == 0


def test_customers_cannot_patch_terms(client: Client, contract: Contract) -> None:
    client.force_login(get_user_model().objects.create_user("tenant-user"))
    assert patch(client, {"base_fee": "0"}).status_code == 403
