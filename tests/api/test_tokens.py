"""/v1/tokens: owners make (secret shown once), list and revoke API tokens; a revoked token is 401."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import ApiToken
from tests.api.conftest import member_client, post_json, token_client
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db


def test_an_owner_makes_a_token_that_works_until_revoked() -> None:
    tenant = TenantFactory.create(code="acme")
    owner = member_client(tenant, "owner")

    made = post_json(owner, "/v1/tokens", {"name": "ci", "role": "read_only"})

    assert made.status_code == 201
    body = made.json()
    secret = body["secret"]
    assert secret.startswith("tmt_") and body["prefix"] == secret[:12]
    assert (body["name"], body["role"], body["tenant"], body["revoked_at"]) == (
        "ci",
        "read_only",
        "acme",
        None,
    )
    listed = owner.get("/v1/tokens").json()["results"]
    assert [t["prefix"] for t in listed] == [body["prefix"]] and "secret" not in listed[0]

    program = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert program.get("/v1/contracts").status_code == 200
    assert post_json(owner, f"/v1/tokens/{body['prefix']}/revoke").json()["revoked_at"] is not None
    refused = program.get("/v1/contracts")
    assert (refused.status_code, refused.json()["code"]) == (401, "invalid_token")


@pytest.mark.parametrize("role", ["billing", "developer", "read_only"])
def test_only_owners_see_or_make_tokens(role: str) -> None:
    client = member_client(TenantFactory.create(), role)
    for response in (client.get("/v1/tokens"), post_json(client, "/v1/tokens", {"role": "owner"})):
        assert (response.status_code, response.json()["code"]) == (403, "forbidden_role")


def test_a_token_cannot_make_another() -> None:
    response = post_json(token_client(TenantFactory.create(), "owner"), "/v1/tokens", {"role": "read_only"})
    assert (response.status_code, response.json()["code"]) == (400, "token_cannot_issue")


def test_a_bad_role_is_400() -> None:
    response = post_json(member_client(TenantFactory.create()), "/v1/tokens", {"role": "god"})
    assert (response.status_code, response.json()["code"]) == (400, "invalid_request")


def test_tokens_of_another_tenant_are_invisible_and_cannot_be_revoked() -> None:
    token_client(TenantFactory.create(code="other"), "owner")  # makes a token of tenant "other"
    theirs = ApiToken.objects.get()
    mine = member_client(TenantFactory.create(code="acme"), "owner")
    assert mine.get("/v1/tokens").json()["results"] == []
    response = post_json(mine, f"/v1/tokens/{theirs.prefix}/revoke")
    assert (response.status_code, response.json()["code"]) == (404, "token_not_found")
    theirs.refresh_from_db()
    assert theirs.revoked_at is None
