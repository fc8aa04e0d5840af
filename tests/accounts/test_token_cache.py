"""API tokens are kept in the cache after lookup, and every change to what a token authorises is seen
on the very next call (accounts.token_cache)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from accounts.models import ApiToken
from tests.factories import TenantFactory, api_token_for

pytestmark = pytest.mark.django_db


def call(secret: str) -> tuple[int, list[str]]:
    """GET /v1/tokens with the token: the status and the SQL that ran for it."""
    with CaptureQueriesContext(connection) as queries:
        status = Client().get("/v1/tokens", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code
    return status, [q["sql"] for q in queries.captured_queries]


def token_lookups(sql: list[str]) -> int:
    return sum('"accounts_apitoken"."digest" =' in statement for statement in sql)


def test_a_token_is_looked_up_once_then_served_from_the_cache() -> None:
    secret = api_token_for(TenantFactory.create())
    status, sql = call(secret)
    assert status == 200 and token_lookups(sql) == 1
    status, sql = call(secret)
    assert status == 200 and token_lookups(sql) == 0


def test_revocation_takes_effect_on_the_next_call() -> None:
    tenant = TenantFactory.create()
    secret = api_token_for(tenant)
    assert call(secret)[0] == 200
    token = ApiToken.objects.get(tenant=tenant)
    response = Client().post(f"/v1/tokens/{token.prefix}/revoke", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert response.status_code == 200, response.content
    assert call(secret)[0] == 401


def test_a_creator_made_staff_voids_the_kept_token_at_once() -> None:
    secret = api_token_for(TenantFactory.create())
    assert call(secret)[0] == 200
    user = ApiToken.objects.get().created_by
    user.is_staff = True
    user.save()
    assert call(secret)[0] == 401


def test_a_deleted_token_is_forgotten() -> None:
    secret = api_token_for(TenantFactory.create())
    assert call(secret)[0] == 200
    ApiToken.objects.get().delete()
    assert call(secret)[0] == 401
