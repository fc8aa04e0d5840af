"""GET /v1/invoices/<id>: staff see every invoice, customers only their own tenant's."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import Membership, Tenant
from billing.services import generate_invoice
from common.periods import month_bounds
from contracts.models import ContractPrice
from tests.billing.usage import at, send
from tests.factories import ContractFactory, TenantFactory

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]


def login(tenant: Tenant | None, name: str, staff: bool = False) -> Client:
    user = get_user_model().objects.create_user(name, is_staff=staff)
    if tenant is not None:
        Membership.objects.create(user=user, tenant=tenant)
    client = Client()
    client.force_login(user)
    return client


def test_the_invoice_json_for_staff_and_its_tenant_only() -> None:
    contract = ContractFactory.create(tax_rate=Decimal("0.06"))
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=Decimal("0.50"))
    send(contract, 3, at(2026, 11, 4))
    invoice = generate_invoice(contract.pk, *month_bounds("2026-11"), now=datetime(2026, 12, 2, tzinfo=UTC))
    url = f"/v1/invoices/{invoice.pk}"

    body = login(None, "ops", staff=True).get(url).json()
    assert (body["number"], body["subtotal"], body["tax"], body["total"], body["amount_due"]) == (
        "TREEMETER-000001",
        "1.50",
        "0.09",
        "1.59",
        "1.59",
    )
    assert body["lines"][0]["kind"] == "usage" and body["lines"][0]["amount"] == "1.50"
    assert login(contract.tenant, "own").get(url).status_code == 200
    assert login(TenantFactory.create(), "other").get(url).status_code == 404
    assert login(None, "nobody").get(url).status_code == 403
    assert Client().get(url).status_code == 401
