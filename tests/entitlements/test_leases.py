"""Quota leases on the platform: grants under a row lock, idempotent settlement, expiry, signatures."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from agents.services import register_agent
from entitlements.leases import period_of
from entitlements.models import QuotaLease, QuotaPeriod
from entitlements.services import issue_api_key, revoke_api_key
from tests.factories import ContractFactory
from treemeter_records import private_key_from_seed, protocol, public_key_to_b64
from webhooks.models import WebhookEvent

pytestmark = pytest.mark.django_db


class Agent:
    """An agent that signs its lease calls as compute_agents does; registered and bound to `contracts`
    unless `registered` is False (an impostor using a registered agent's id with its own key)."""

    def __init__(self, *contracts: Any, agent_id: str = "gpu-1", registered: bool = True) -> None:
        self.key = private_key_from_seed(os.urandom(32))
        self.agent_id = agent_id
        if not registered:
            return
        register_agent(
            agent_id=agent_id,
            public_key_b64=public_key_to_b64(self.key),
            tenant_codes=[],
            contract_codes=[c.code for c in contracts],
        )

    def post(self, client: Client, path: str, payload: dict[str, Any], **overrides: str) -> Any:
        body = json.dumps(payload).encode()
        headers = protocol.signed_headers(self.key, self.agent_id, "POST", path, body)
        return client.post(path, body, content_type="application/json", headers={**headers, **overrides})

    def grant(
        self, client: Client, key_hash: str, tokens: int, min_tokens: int = 1, request_id: str | None = None
    ) -> Any:
        return self.post(
            client,
            protocol.LEASES_PATH,
            {
                "key_hash": key_hash,
                "period": period_of(timezone.now()),
                "tokens": tokens,
                "min_tokens": min_tokens,
                "request_id": request_id or uuid.uuid4().hex,
            },
        )

    def settle(self, client: Client, lease: str, seq: int, spent: int, final: bool) -> Any:
        return self.post(
            client, protocol.lease_settle_path(lease), {"seq": seq, "spent_tokens": spent, "final": final}
        )


def standing(key_hash: str) -> tuple[int, int]:
    row = QuotaPeriod.objects.get(api_key__key_hash=key_hash, period=period_of(timezone.now()))
    return row.settled_tokens, row.outstanding_tokens


def test_a_grant_is_at_most_what_remains_and_a_final_report_returns_the_rest(client: Client) -> None:
    contract = ContractFactory.create()
    key = issue_api_key(contract_code=contract.code, quota_tokens=1000).api_key
    agent = Agent(contract)

    first = agent.grant(client, key.key_hash, 700)
    assert first.status_code == 201
    assert (first.json()["granted_tokens"], first.json()["remaining_tokens"], first.json()["state"]) == (
        700,
        300,
        "active",
    )
    second = agent.grant(client, key.key_hash, 700)
    assert (second.json()["granted_tokens"], second.json()["remaining_tokens"]) == (300, 0)
    refused = agent.grant(client, key.key_hash, 10)
    assert refused.status_code == 429
    assert refused.json()["code"] == "quota_exhausted"
    assert refused.json()["details"]["remaining_tokens"] == 0

    renewed = agent.settle(client, first.json()["lease"], 1, 250, final=False)
    assert renewed.status_code == 200
    assert (renewed.json()["charged_tokens"], renewed.json()["remaining_tokens"]) == (700, 0)
    settled = agent.settle(client, first.json()["lease"], 2, 400, final=True)
    assert (settled.json()["state"], settled.json()["charged_tokens"]) == ("settled", 400)
    assert settled.json()["remaining_tokens"] == 300
    assert standing(key.key_hash) == (400, 300)
    wants_more = agent.grant(client, key.key_hash, 500, min_tokens=200)
    assert (wants_more.json()["granted_tokens"], wants_more.json()["remaining_tokens"]) == (300, 0)
    too_big = agent.grant(client, key.key_hash, 50, min_tokens=50)
    assert too_big.status_code == 429


def test_a_retried_grant_returns_the_same_lease(client: Client) -> None:
    contract = ContractFactory.create()
    key = issue_api_key(contract_code=contract.code, quota_tokens=1000).api_key
    agent = Agent(contract)
    first = agent.grant(client, key.key_hash, 400, request_id="grant-000001")
    again = agent.grant(client, key.key_hash, 400, request_id="grant-000001")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["lease"] == first.json()["lease"]
    assert QuotaLease.objects.count() == 1 and standing(key.key_hash) == (0, 400)


def test_a_report_retried_twice_counts_once_and_reports_apply_in_order(client: Client) -> None:
    contract = ContractFactory.create()
    key = issue_api_key(contract_code=contract.code, quota_tokens=1000).api_key
    agent = Agent(contract)
    lease = agent.grant(client, key.key_hash, 600).json()["lease"]

    answers = [agent.settle(client, lease, 1, 100, final=True) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert [a.json()["applied"] for a in answers] == [True, False, False]
    assert standing(key.key_hash) == (100, 0)
    assert answers[2].json()["remaining_tokens"] == 900

    other = agent.grant(client, key.key_hash, 500).json()["lease"]
    assert agent.settle(client, other, 2, 300, final=False).json()["applied"] is True
    older = agent.settle(client, other, 1, 100, final=False)
    assert (older.status_code, older.json()["applied"], older.json()["spent_tokens"]) == (200, False, 300)
    conflict = agent.settle(client, other, 2, 350, final=False)
    assert (conflict.status_code, conflict.json()["code"]) == (409, "report_conflict")
    lower = agent.settle(client, other, 3, 200, final=False)
    assert (lower.status_code, lower.json()["code"]) == (400, "spend_decreased")
    assert agent.settle(client, other, 3, 500, final=True).json()["charged_tokens"] == 500
    after = agent.settle(client, other, 4, 500, final=True)
    assert (after.status_code, after.json()["code"]) == (409, "lease_settled")
    assert standing(key.key_hash) == (600, 0)


def test_an_expired_lease_is_charged_in_full_until_its_late_report(client: Client) -> None:
    contract = ContractFactory.create()
    key = issue_api_key(contract_code=contract.code, quota_tokens=1000).api_key
    agent = Agent(contract)
    lease = agent.grant(client, key.key_hash, 800).json()["lease"]
    agent.settle(client, lease, 1, 100, final=False)  # a report, but not the final one
    QuotaLease.objects.filter(pk=lease).update(expires_at=timezone.now() - timedelta(seconds=1))

    other = Agent(contract, agent_id="gpu-2")
    assert other.grant(client, key.key_hash, 1000).json()["granted_tokens"] == 200
    late_renewal = agent.settle(client, lease, 2, 150, final=False)
    assert (late_renewal.json()["state"], late_renewal.json()["charged_tokens"]) == ("expired", 800)
    assert late_renewal.json()["expires_in_s"] == 0
    late = agent.settle(client, lease, 3, 150, final=True)
    assert (late.json()["state"], late.json()["charged_tokens"], late.json()["remaining_tokens"]) == (
        "settled",
        150,
        650,
    )
    assert standing(key.key_hash) == (150, 200)


def test_quota_exhausted_is_published_once_per_key_and_month(client: Client) -> None:
    contract = ContractFactory.create()
    key = issue_api_key(contract_code=contract.code, quota_tokens=500).api_key
    agent = Agent(contract)
    lease = agent.grant(client, key.key_hash, 500).json()["lease"]
    agent.settle(client, lease, 1, 200, final=True)
    agent.grant(client, key.key_hash, 300)  # exhausted a second time
    month = period_of(timezone.now())
    events = WebhookEvent.objects.filter(type="quota.exhausted")
    assert [e.event_id for e in events] == [f"quota.exhausted:{contract.code}:api_key:{key.prefix}:{month}"]
    assert events[0].tenant == contract.tenant
    assert events[0].payload == {
        "contract": contract.code,
        "dimension": f"api_key:{key.prefix}",
        "api_key": key.prefix,
        "month": month,
        "included": "500",
        "used": "500",
    }


def test_unsigned_forged_stale_or_tampered_lease_calls_are_refused(client: Client) -> None:
    contract = ContractFactory.create()
    key = issue_api_key(contract_code=contract.code, quota_tokens=500).api_key
    agent = Agent(contract)
    payload = {
        "key_hash": key.key_hash,
        "period": period_of(timezone.now()),
        "tokens": 100,
        "min_tokens": 1,
        "request_id": "grant-000001",
    }
    unsigned = client.post(protocol.LEASES_PATH, payload, content_type="application/json")
    assert unsigned.status_code == 401 and unsigned.json()["code"] == "bad_request_signature"
    impostor = Agent(agent_id="gpu-1", registered=False)
    forged = impostor.post(client, protocol.LEASES_PATH, payload)
    assert forged.status_code == 401 and forged.json()["code"] == "bad_request_signature"
    signed_for = json.dumps({**payload, "tokens": 1}).encode()
    headers = protocol.signed_headers(agent.key, "gpu-1", "POST", protocol.LEASES_PATH, signed_for)
    tampered = client.post(
        protocol.LEASES_PATH, json.dumps(payload), content_type="application/json", headers=headers
    )
    assert tampered.status_code == 401
    stale_ts = time.time_ns() - 3600 * 10**9
    stale = agent.post(
        client,
        protocol.LEASES_PATH,
        payload,
        **{
            protocol.HEADER_TIMESTAMP: str(stale_ts),
            protocol.HEADER_SIGNATURE: protocol.sign_request(
                agent.key, "POST", protocol.LEASES_PATH, stale_ts, json.dumps(payload).encode()
            ),
        },
    )
    assert stale.status_code == 401 and stale.json()["code"] == "stale_request"
    lease = agent.grant(client, key.key_hash, 100).json()["lease"]
    forged_settle = impostor.settle(client, lease, 1, 0, final=True)
    assert forged_settle.status_code == 401
    assert not QuotaLease.objects.exclude(pk=lease).exists() and standing(key.key_hash) == (0, 100)


def test_keys_and_leases_outside_the_agents_scope_are_not_found(client: Client) -> None:
    mine, theirs = ContractFactory.create(), ContractFactory.create()
    their_key = issue_api_key(contract_code=theirs.code, quota_tokens=500).api_key
    my_key = issue_api_key(contract_code=mine.code, quota_tokens=500).api_key
    agent, their_agent = Agent(mine), Agent(theirs, agent_id="gpu-2")

    other_tenant = agent.grant(client, their_key.key_hash, 100)
    assert (other_tenant.status_code, other_tenant.json()["code"]) == (404, "unknown_api_key")
    unknown = agent.grant(client, "0" * 64, 100)
    assert (unknown.status_code, unknown.json()["code"]) == (404, "unknown_api_key")
    their_lease = their_agent.grant(client, their_key.key_hash, 100).json()["lease"]
    stolen = agent.settle(client, their_lease, 1, 0, final=True)
    assert (stolen.status_code, stolen.json()["code"]) == (404, "lease_not_found")
    assert agent.settle(client, str(uuid.uuid4()), 1, 0, final=True).status_code == 404
    bad = agent.grant(client, my_key.key_hash, 0)
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_lease_request")
    assert set(bad.json()["details"]) == {"tokens"}
    assert standing(their_key.key_hash) == (0, 100)


def test_keys_without_quota_or_revoked_get_no_lease(client: Client) -> None:
    contract = ContractFactory.create()
    unlimited = issue_api_key(contract_code=contract.code).api_key
    revoked = issue_api_key(contract_code=contract.code, quota_tokens=100)
    revoke_api_key(revoked.api_key.prefix)
    agent = Agent(contract)
    no_quota = agent.grant(client, unlimited.key_hash, 100)
    assert (no_quota.status_code, no_quota.json()["code"]) == (409, "no_quota")
    gone = agent.grant(client, revoked.api_key.key_hash, 100)
    assert (gone.status_code, gone.json()["code"]) == (403, "api_key_revoked")
    assert not QuotaLease.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_grants_from_many_agents_never_exceed_the_quota() -> None:
    contract = ContractFactory.create()
    key = issue_api_key(contract_code=contract.code, quota_tokens=1000).api_key
    agents = [Agent(contract, agent_id=f"gpu-{n}") for n in range(8)]
    answers: list[int] = []
    barrier = threading.Barrier(len(agents))

    def ask(agent: Agent) -> None:
        try:
            barrier.wait()
            response = agent.grant(Client(), key.key_hash, 300, min_tokens=300)
            answers.append(response.status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=ask, args=(agent,)) for agent in agents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [201, 201, 201, 429, 429, 429, 429, 429]
    assert standing(key.key_hash) == (0, 900)
    assert sorted(QuotaLease.objects.values_list("granted_tokens", flat=True)) == [300, 300, 300]
