"""GET /v1/packages and /v1/packages/<code>: active packages with their purchasable plans."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.test import Client

from catalog.models import PackagePlan, PlanPrice
from tests.api.conftest import member_client, token_client
from tests.factories import ComputePackageFactory, TenantFactory

pytestmark = pytest.mark.django_db


def make_catalogue() -> None:
    review = ComputePackageFactory.create(code="review-contracts", name="Review contracts", unit="contract")
    ComputePackageFactory.create(code="retired", active=False)
    starter = PackagePlan.objects.create(
        package=review, code="starter", name="Starter", currency="CNY", base_fee=Decimal("99.00")
    )
    PlanPrice.objects.create(
        plan=starter, dimension="requests", unit_price=Decimal("0.05"), included_quantity=Decimal(1000)
    )
    PackagePlan.objects.create(package=review, code="old", name="Old", active=False)
    ComputePackageFactory.create(code="anonymise", name="Anonymise records")


def test_the_catalogue_lists_active_packages_with_active_plans_only() -> None:
    make_catalogue()
    body = token_client(TenantFactory.create(), "read_only").get("/v1/packages").json()

    assert [p["code"] for p in body["results"]] == ["anonymise", "review-contracts"]
    review = body["results"][1]
    assert (review["name"], review["unit"], [plan["code"] for plan in review["plans"]]) == (
        "Review contracts",
        "contract",
        ["starter"],
    )
    assert review["plans"][0] == {
        "code": "starter",
        "name": "Starter",
        "currency": "CNY",
        "period": "monthly",
        "base_fee": "99.00",
        "payment": "invoice",
        "prices": [
            {
                "dimension": "requests",
                "charge_model": "per_unit",
                "unit_price": "0.05000000",
                "properties": {},
                "included_quantity": "1000.000000",
            }
        ],
    }


def test_packages_page_by_cursor() -> None:
    make_catalogue()
    client = member_client(TenantFactory.create())
    first = client.get("/v1/packages?limit=1").json()
    second = client.get(first["next"]).json()
    assert [p["code"] for p in first["results"] + second["results"]] == ["anonymise", "review-contracts"]
    assert second["next"] is None


def test_one_package_and_an_inactive_or_unknown_one() -> None:
    make_catalogue()
    client = member_client(TenantFactory.create())
    assert client.get("/v1/packages/review-contracts").json()["plans"][0]["base_fee"] == "99.00"
    for code in ("retired", "nope"):
        response = client.get(f"/v1/packages/{code}")
        assert (response.status_code, response.json()["code"]) == (404, "not_found")


def test_the_catalogue_needs_a_caller() -> None:
    response = Client().get("/v1/packages")
    assert (response.status_code, response.json()["code"]) == (401, "not_authenticated")


def test_plans_are_checked_as_the_admin_saves_them() -> None:
    package = ComputePackageFactory.create()
    unpaid = PackagePlan(package=package, code="card", name="Card", payment="checkout", base_fee=Decimal(0))
    fractional_yen = PackagePlan(
        package=package, code="jp", name="JP", currency="JPY", base_fee=Decimal("9.50")
    )
    for plan in (unpaid, fractional_yen):
        with pytest.raises(ValidationError):
            plan.full_clean()
    plan = PackagePlan.objects.create(package=package, code="ok", name="OK")
    with pytest.raises(ValidationError, match="unknown_dimension"):
        PlanPrice(plan=plan, dimension="gpu_hours", unit_price=Decimal(1)).full_clean()
    with pytest.raises(ValidationError, match="missing_property"):
        PlanPrice(plan=plan, dimension="requests", charge_model="graduated").full_clean()


def test_the_admin_edits_plans_with_their_prices() -> None:
    staff = get_user_model().objects.create_superuser("admin", password="pw")
    client = Client()
    client.force_login(staff)
    package = ComputePackageFactory.create()
    response = client.post(
        "/admin/catalog/packageplan/add/",
        {
            "package": package.pk,
            "code": "team",
            "name": "Team",
            "currency": "EUR",
            "period": "monthly",
            "base_fee": "49.00",
            "payment": "invoice",
            "active": "on",
            "prices-TOTAL_FORMS": "1",
            "prices-INITIAL_FORMS": "0",
            "prices-0-dimension": "tokens_out",
            "prices-0-charge_model": "per_unit",
            "prices-0-unit_price": "0.00002",
            "prices-0-properties": "{}",
            "prices-0-included_quantity": "100000",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    plan = PackagePlan.objects.get(code="team")
    assert (plan.currency, plan.base_fee) == ("EUR", Decimal("49.00"))
    assert list(plan.prices.values_list("dimension", "unit_price", "included_quantity")) == [
        ("tokens_out", Decimal("0.00002000"), Decimal("100000.000000"))
    ]
