"""Agent registry: service, management command and staff API."""

from __future__ import annotations

import base64
import os
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from agents.models import Agent, AgentBinding, AgentKey
from agents.services import AgentRegistrationError, register_agent, revoke_key
from tests.factories import ContractFactory, TenantFactory
from treemeter_records import key_id_for, private_key_from_seed, public_key_to_b64

pytestmark = pytest.mark.django_db


def new_public_key() -> str:
    return public_key_to_b64(private_key_from_seed(os.urandom(32)))


def test_registering_binds_tenants_and_contracts_and_is_idempotent() -> None:
    tenant = TenantFactory.create()
    contract = ContractFactory.create()
    public_key = new_public_key()
    key = register_agent(
        agent_id="gpu-7",
        public_key_b64=public_key,
        tenant_codes=[tenant.code],
        contract_codes=[contract.code],
    )
    again = register_agent(
        agent_id="gpu-7",
        public_key_b64=public_key,
        tenant_codes=[tenant.code],
        contract_codes=[contract.code],
    )
    assert key.pk == again.pk
    assert key.key_id == key_id_for(base64.b64decode(public_key))
    bindings = set(AgentBinding.objects.values_list("tenant__code", "contract__code"))
    assert bindings == {(tenant.code, None), (contract.tenant.code, contract.code)}
    assert Agent.objects.count() == 1 and AgentKey.objects.count() == 1


@pytest.mark.parametrize(
    ("public_key", "code"),
    [("not base64!", "invalid_public_key"), ("AAAA", "invalid_public_key")],
)
def test_bad_public_keys_are_refused(public_key: str, code: str) -> None:
    with pytest.raises(AgentRegistrationError) as raised:
        register_agent(
            agent_id="gpu-1", public_key_b64=public_key, tenant_codes=[TenantFactory.create().code]
        )
    assert raised.value.code == code
    assert not Agent.objects.exists()


def test_unknown_tenants_are_refused() -> None:
    with pytest.raises(AgentRegistrationError) as raised:
        register_agent(agent_id="gpu-1", public_key_b64=new_public_key(), tenant_codes=["nobody"])
    assert raised.value.code == "unknown_tenant"


def test_one_key_cannot_serve_two_agents() -> None:
    public_key, tenant = new_public_key(), TenantFactory.create()
    register_agent(agent_id="gpu-1", public_key_b64=public_key, tenant_codes=[tenant.code])
    with pytest.raises(AgentRegistrationError) as raised:
        register_agent(agent_id="gpu-2", public_key_b64=public_key, tenant_codes=[tenant.code])
    assert raised.value.code == "key_in_use"


def test_revoking_keeps_the_first_revocation_time() -> None:
    key = register_agent(
        agent_id="gpu-1", public_key_b64=new_public_key(), tenant_codes=[TenantFactory.create().code]
    )
    first = revoke_key(key.key_id).revoked_at
    assert first is not None and revoke_key(key.key_id).revoked_at == first


def test_management_command_registers_and_explains_errors(capsys: Any) -> None:
    tenant = TenantFactory.create()
    call_command("register_agent", "gpu-9", "--public-key", new_public_key(), "--tenant", tenant.code)
    assert "registered executor gpu-9 key ed25519:" in capsys.readouterr().out
    with pytest.raises(CommandError, match="unknown_tenant"):
        call_command("register_agent", "gpu-9", "--public-key", new_public_key(), "--tenant", "nobody")
    with pytest.raises(CommandError, match="at least one"):
        call_command("register_agent", "gpu-9", "--public-key", new_public_key())


@pytest.fixture
def staff_client(client: Client) -> Client:
    client.force_login(get_user_model().objects.create_user("ops", is_staff=True))
    return client


def test_staff_register_an_agent_through_the_api(staff_client: Client) -> None:
    tenant = TenantFactory.create()
    response = staff_client.post(
        "/v1/agents",
        {"agent_id": "gpu-3", "public_key": new_public_key(), "tenants": [tenant.code]},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["key_id"].startswith("ed25519:")


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({"agent_id": "Bad Id", "public_key": "x", "tenants": ["t"]}, "invalid_request"),
        ({"agent_id": "gpu-3", "public_key": "AAAA", "tenants": ["t"]}, "invalid_public_key"),
        ({"agent_id": "gpu-3", "public_key": "AAAA"}, "invalid_request"),
    ],
)
def test_bad_registrations_get_a_4xx_with_a_code(
    staff_client: Client, payload: dict[str, Any], code: str
) -> None:
    response = staff_client.post("/v1/agents", payload, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == code
    assert not Agent.objects.exists()


def test_customers_and_anonymous_callers_cannot_register_agents(client: Client) -> None:
    payload = {"agent_id": "gpu-3", "public_key": new_public_key(), "tenants": [TenantFactory.create().code]}
    anonymous = client.post("/v1/agents", payload, content_type="application/json")
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"] == "Bearer"
    client.force_login(get_user_model().objects.create_user("customer"))
    response = client.post("/v1/agents", payload, content_type="application/json")
    assert response.status_code == 403 and response.json()["code"] == "permission_denied"
    assert not Agent.objects.exists()
