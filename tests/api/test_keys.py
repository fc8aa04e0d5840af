"""/v1/keys: developers issue inference API keys for their own contracts (shown once), list, revoke."""

from __future__ import annotations

import pytest

from entitlements.models import ApiKey
from tests.api.conftest import post_json, token_client
from tests.factories import ContractFactory, TenantFactory
from treemeter_records.protocol import API_KEY_PREFIX, api_key_hash

pytestmark = pytest.mark.django_db


def test_a_developer_issues_lists_and_revokes_a_key() -> None:
    contract = ContractFactory.create(code="acme-main", tenant=TenantFactory.create(code="acme"))
    client = token_client(contract.tenant, "developer")

    made = post_json(
        client,
        "/v1/keys",
        {"contract": "acme-main", "sla_class": "gold", "quota_tokens": 50000, "name": "prod"},
    )

    assert made.status_code == 201, made.content
    body = made.json()
    secret = body.pop("api_key")
    assert secret.startswith(API_KEY_PREFIX) and ApiKey.objects.get().key_hash == api_key_hash(secret)
    assert {k: body[k] for k in ("prefix", "name", "contract", "sla_class", "quota_tokens", "status")} == {
        "prefix": secret[:12],
        "name": "prod",
        "contract": "acme-main",
        "sla_class": "gold",
        "quota_tokens": 50000,
        "status": "active",
    }
    listed = client.get("/v1/keys").json()["results"]
    assert [k["prefix"] for k in listed] == [body["prefix"]] and "api_key" not in listed[0]

    revoked = post_json(client, f"/v1/keys/{body['prefix']}/revoke").json()
    assert revoked["status"] == "revoked"
    assert client.get("/v1/keys?status=active").json()["results"] == []
    assert len(client.get("/v1/keys?status=revoked").json()["results"]) == 1


@pytest.mark.parametrize("role", ["billing", "read_only"])
def test_billing_and_read_only_cannot_issue_keys(role: str) -> None:
    contract = ContractFactory.create()
    response = post_json(token_client(contract.tenant, role), "/v1/keys", {"contract": contract.code})
    assert (response.status_code, response.json()["code"]) == (403, "forbidden_role")
    assert ApiKey.objects.count() == 0


def test_another_tenants_contract_and_key_are_404() -> None:
    theirs = ContractFactory.create(code="other-main")
    mine = token_client(TenantFactory.create(code="acme"), "developer")
    response = post_json(mine, "/v1/keys", {"contract": "other-main"})
    assert (response.status_code, response.json()["code"]) == (404, "contract_not_found")

    key = post_json(token_client(theirs.tenant, "developer"), "/v1/keys", {"contract": "other-main"}).json()
    assert mine.get("/v1/keys").json()["results"] == []
    refused = post_json(mine, f"/v1/keys/{key['prefix']}/revoke")
    assert (refused.status_code, refused.json()["code"]) == (404, "unknown_api_key")
    assert ApiKey.objects.get().revoked_at is None
