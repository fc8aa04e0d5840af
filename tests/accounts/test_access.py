"""Who a request acts for: staff, a member in a role, an API token; and what each role may write."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from accounts.access import WRITE_BILLING, principal_of
from accounts.models import ApiToken, Membership, Role
from accounts.permissions import TenantRolePermission
from tests.factories import MembershipFactory, TenantFactory, api_token_for

pytestmark = pytest.mark.django_db


class _BillingWrite(APIView):
    write_roles = WRITE_BILLING


def _allowed(role: str, method: str) -> bool:
    member = MembershipFactory.create(role=role)
    request = APIRequestFactory().generic(method, "/v1/x")
    request.user = member.user
    drf_request = _BillingWrite().initialize_request(request)
    drf_request.user = member.user
    return TenantRolePermission().has_permission(drf_request, _BillingWrite())


@pytest.mark.parametrize(
    ("role", "may_write"),
    [(Role.OWNER, True), (Role.BILLING, True), (Role.DEVELOPER, False), (Role.READ_ONLY, False)],
)
def test_every_role_reads_and_only_the_views_write_roles_write(role: str, may_write: bool) -> None:
    assert _allowed(role, "GET") is True
    assert _allowed(role, "POST") is may_write


def test_a_token_acts_for_its_tenant_and_role_not_for_its_makers_membership() -> None:
    tenant = TenantFactory.create()
    secret = api_token_for(tenant, Role.READ_ONLY)
    token = ApiToken.objects.get(prefix=secret[:12])
    request = APIRequestFactory().get("/v1/x", HTTP_AUTHORIZATION=f"Bearer {secret}")
    drf_request = APIView().initialize_request(request)
    principal = principal_of(drf_request)
    assert (principal.tenant_code, principal.role, principal.token_id) == (tenant.code, "read_only", token.pk)
    assert Membership.objects.get(user_id=token.created_by_id).role == Role.OWNER
    assert len(secret) > 40 and token.digest != secret and secret not in token.digest


def test_unknown_revoked_and_staff_made_tokens_are_refused(client: Client) -> None:
    tenant = TenantFactory.create()
    secret = api_token_for(tenant, Role.OWNER)
    assert client.get("/v1/ledger/disputes", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 200
    bad = client.get("/v1/ledger/disputes", HTTP_AUTHORIZATION="Bearer tmt_not-a-token")
    assert bad.status_code == 401 and bad.json()["code"] == "invalid_token"
    token = ApiToken.objects.get(prefix=secret[:12])
    token.created_by = get_user_model().objects.create_user("s", is_staff=True)
    token.save()  # as the admin does; the kept token is forgotten (accounts.token_cache)
    assert client.get("/v1/ledger/disputes", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 401


def test_a_user_of_no_tenant_gets_403_no_tenant(client: Client) -> None:
    client.force_login(get_user_model().objects.create_user("drifter"))
    response = client.get("/v1/ledger/disputes")
    assert response.status_code == 403 and response.json()["code"] == "no_tenant"


def test_a_read_only_token_cannot_open_a_dispute(client: Client) -> None:
    secret = api_token_for(TenantFactory.create(), Role.READ_ONLY)
    response = client.post(
        "/v1/ledger/disputes",
        {"line": 1, "reason": "x"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )
    assert response.status_code == 403 and response.json()["code"] == "forbidden_role"
