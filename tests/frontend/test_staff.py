"""Platform staff see every tenant's objects in the portal; a user of no tenant sees none."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from catalog.models import PackagePlan
from entitlements.services import issue_api_key
from tests.factories import ContractFactory
from tests.frontend.support import signed_in

pytestmark = pytest.mark.django_db


def test_staff_see_every_tenants_contracts_and_keys_but_get_no_buy_button() -> None:
    first, second = ContractFactory.create(), ContractFactory.create()
    PackagePlan.objects.create(package=first.package, code="standard", name="Standard")
    key = issue_api_key(contract_code=second.code)
    staff = signed_in(User.objects.create_user("finance", password="pw", is_staff=True))
    contracts = staff.get(reverse("portal-contracts")).content.decode()
    assert first.code in contracts and second.code in contracts
    assert first.tenant.name in contracts and second.tenant.name in contracts  # the Customer column
    assert key.api_key.prefix in staff.get(reverse("portal-keys")).content.decode()
    assert "platform staff" in staff.get(reverse("portal-home")).content.decode()
    catalogue = staff.get(reverse("portal-packages")).content.decode()
    assert f'data-testid="plan-{first.package.code}-standard"' in catalogue  # staff buy nothing
    assert 'data-testid="buy-' not in catalogue


def test_a_user_of_no_tenant_is_refused() -> None:
    ContractFactory.create()
    stranger = signed_in(User.objects.create_user("nobody", password="pw"))
    response = stranger.get(reverse("portal-contracts"))
    assert response.status_code == 403
    assert "Your account does not belong to any customer." in response.content.decode()
