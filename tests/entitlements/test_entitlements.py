"""Customer API keys and the signed entitlement snapshot agents pull."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from agents.services import register_agent, revoke_key
from catalog.models import Capability, PackageCapability
from entitlements.models import ApiKey
from entitlements.services import EntitlementError, issue_api_key, revoke_api_key
from tests.factories import ContractFactory
from treemeter_records import key_id_for, private_key_from_seed, protocol, public_key_to_b64

pytestmark = pytest.mark.django_db


def agent_for(*contracts: Any, agent_id: str = "gpu-1") -> Any:
    key = private_key_from_seed(os.urandom(32))
    register_agent(
        agent_id=agent_id,
        public_key_b64=public_key_to_b64(key),
        tenant_codes=[],
        contract_codes=[c.code for c in contracts],
    )
    return key


def signed_get(client: Client, key: Any, agent_id: str, *, timestamp: int | None = None) -> Any:
    ts = time.time_ns() if timestamp is None else timestamp
    return client.get(
        protocol.SNAPSHOT_PATH,
        headers={
            protocol.HEADER_AGENT: agent_id,
            protocol.HEADER_KEY_ID: key_id_for(key),
            protocol.HEADER_TIMESTAMP: str(ts),
            protocol.HEADER_SIGNATURE: protocol.sign_request(key, "GET", protocol.SNAPSHOT_PATH, ts),
        },
    )


def test_a_key_is_stored_hashed_and_shown_once() -> None:
    contract = ContractFactory.create()
    issued = issue_api_key(contract_code=contract.code, sla_class="gold", quota_tokens=1000)
    stored = ApiKey.objects.get()
    assert issued.secret.startswith("tmk_") and len(issued.secret) > 40
    assert stored.key_hash == protocol.api_key_hash(issued.secret) and issued.secret not in str(
        stored.__dict__
    )
    assert (stored.tenant, stored.contract, stored.sla_class, stored.quota_tokens) == (
        contract.tenant,
        contract,
        "gold",
        1000,
    )
    with pytest.raises(EntitlementError, match="Unknown contract"):
        issue_api_key(contract_code="nope")
    with pytest.raises(EntitlementError, match="SLA class"):
        issue_api_key(contract_code=contract.code, sla_class="Not A Slug")


def test_the_snapshot_is_signed_by_the_platform_and_scoped_to_the_agent(client: Client) -> None:
    mine, theirs = ContractFactory.create(), ContractFactory.create()
    my_key = issue_api_key(contract_code=mine.code, sla_class="gold", quota_tokens=500)
    issue_api_key(contract_code=theirs.code)
    revoked = issue_api_key(contract_code=mine.code)
    revoke_api_key(revoked.api_key.prefix)
    agent_key = agent_for(mine)
    agent_for(theirs, agent_id="gpu-2")

    answer = signed_get(client, agent_key, "gpu-1")
    assert answer.status_code == 200
    body = answer.json()
    platform = private_key_from_seed(settings.PLATFORM_SIGNING_KEY).public_key()
    assert protocol.verify_snapshot(platform, body["snapshot"], body["signature"])
    snapshot = body["snapshot"]
    assert snapshot["agent_id"] == "gpu-1"
    by_hash = {k["key_hash"]: k for k in snapshot["keys"]}
    assert set(by_hash) == {my_key.api_key.key_hash, revoked.api_key.key_hash}
    assert by_hash[my_key.api_key.key_hash] == {
        "key_hash": my_key.api_key.key_hash,
        "prefix": my_key.api_key.prefix,
        "tenant": mine.tenant.code,
        "contract": mine.code,
        "package": mine.package.code,
        "models": [],  # a package without capabilities: unrestricted
        "sla_class": "gold",
        "quota_tokens": 500,
        "quota_period": "month",
        "status": "active",
    }
    assert by_hash[revoked.api_key.key_hash]["status"] == "revoked"
    tampered = {**snapshot, "keys": []}
    assert not protocol.verify_snapshot(platform, tampered, body["signature"])


def test_a_key_of_a_package_with_capabilities_may_reach_only_their_models(client: Client) -> None:
    composed = ContractFactory.create()
    for code, model_id in (("ocr", "onnx/ocr"), ("clauses", "moe-tiny"), ("ocr-copy", "onnx/ocr")):
        capability = Capability.objects.create(
            code=code, name=code, engine="moe", model_id=model_id, sla_timeout_ms=1000
        )
        PackageCapability.objects.create(package=composed.package, capability=capability)
    composed_key = issue_api_key(contract_code=composed.code)
    agent_key = agent_for(composed)
    snapshot = signed_get(client, agent_key, "gpu-1").json()["snapshot"]
    by_hash = {k["key_hash"]: k for k in snapshot["keys"]}
    assert by_hash[composed_key.api_key.key_hash]["models"] == ["moe-tiny", "onnx/ocr"]  # each once


def test_unsigned_stale_foreign_or_revoked_agent_requests_are_refused(client: Client) -> None:
    contract = ContractFactory.create()
    key = agent_for(contract)
    intruder = private_key_from_seed(os.urandom(32))
    assert client.get(protocol.SNAPSHOT_PATH).status_code == 400
    assert signed_get(client, key, "gpu-1", timestamp=time.time_ns() - 3600 * 10**9).status_code == 401
    assert signed_get(client, key, "gpu-other").status_code == 401
    forged = signed_get(client, intruder, "gpu-1")
    assert forged.status_code == 401 and forged.json()["code"] == "bad_request_signature"
    revoke_key(key_id_for(key))
    assert signed_get(client, key, "gpu-1").status_code == 401


def test_staff_issue_and_revoke_keys_through_the_api(admin_client: Client, client: Client) -> None:
    contract = ContractFactory.create()
    assert client.post("/v1/api-keys", {"contract": contract.code}).status_code == 401
    issued = admin_client.post(
        "/v1/api-keys", {"contract": contract.code, "quota_tokens": 10}, content_type="application/json"
    )
    assert issued.status_code == 201
    secret = issued.json()["api_key"]
    assert ApiKey.objects.get().key_hash == protocol.api_key_hash(secret)
    unknown = admin_client.post("/v1/api-keys", {"contract": "nope"}, content_type="application/json")
    assert unknown.status_code == 400 and unknown.json()["code"] == "unknown_contract"
    revoked = admin_client.post(f"/v1/api-keys/{issued.json()['prefix']}/revoke")
    assert revoked.status_code == 200 and ApiKey.objects.get().revoked_at is not None
    assert admin_client.post("/v1/api-keys/tmk_none/revoke").status_code == 404
