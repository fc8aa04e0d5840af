"""Ingest of record format v2 (the serving tree): a record whose router decision and executor
signature verify against registered keys is stored and read back byte for byte; every forged or
unaccountable part is refused with its own code."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from agents.services import revoke_key
from clickhouse_store.queries.records import record_of, stored_lines
from contracts.models import Contract
from tests.factories import ContractFactory, SigningAgent, signing_agent
from tests.ingest.support import assert_stores_agree, post
from treemeter_records import canonical_bytes, generate_keypair, protocol, sign_record

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
NODE = "l1.00112233445566ff"


@pytest.fixture
def contract() -> Contract:
    return ContractFactory.create()


@pytest.fixture
def executor(contract: Contract) -> SigningAgent:
    return signing_agent(contract, agent_id="exec-a")


@pytest.fixture
def router(contract: Contract) -> SigningAgent:
    return signing_agent(contract, agent_id="l1-a", kind="router")


def routed(executor: SigningAgent, router: SigningAgent, contract: Contract, **claims: Any) -> dict[str, Any]:
    """A v2 record of ``executor`` that ``router`` decided (claims overridable), signed by both."""
    v1 = executor.record(
        contract,
        hops=[
            {"layer": "L1", "node": NODE, "latency_us": 1_200},
            {"layer": "L2", "node": "exec-a.l2", "latency_us": 800},
            {"layer": "L3", "node": "exec-a.l3", "latency_us": 90_000},
            {"layer": "L1", "node": NODE, "latency_us": 300},
        ],
    )
    made = {
        "record_id": v1["record_id"],
        "router": router.agent_id,
        "node": NODE,
        "rules_sha256": "00112233445566ff" * 4,
        "domain": "contract_review",
        "confidence_ppm": 930_000,
        "l2_confirmation": False,
        "path": ["L1", "L2", "L3", "L1"],
        "subtree": "legal",
        "executor": executor.agent_id,
        "preheat": [[0, 1], [1, 2]],
        "l1_in_us": 1_000,
        "decided_ns": v1["start_ns"] + 1_000_000,
    }
    signer = claims.pop("signer", router.key)
    after_signing = claims.pop("after_signing", {})
    decision = protocol.sign_decision(signer, {**made, **claims})
    decision["claims"].update(after_signing)  # what an executor forging the router's part would do
    return sign_record(v1, decision, executor.key)


def answer(client: Client, executor: SigningAgent, record: dict[str, Any]) -> dict[str, Any]:
    response = post(client, executor.batch([record]).body())
    assert response.status_code in (200, 422), response.content
    return response.json()


def refusal(body: dict[str, Any]) -> tuple[str, str]:
    assert not body["accepted"], body
    return body["rejections"][0]["code"], body["rejections"][0]["field"]


def test_a_routed_record_is_stored_and_read_back_as_it_was_signed(
    client: Client, contract: Contract, executor: SigningAgent, router: SigningAgent
) -> None:
    record = routed(executor, router, contract)
    body = answer(client, executor, record)
    assert (body["accepted"], body["rejected"]) == (1, 0)
    assert assert_stores_agree() == 1  # the store audit re-hashes what ClickHouse gives back
    stored = record_of(record["record_id"], contract.tenant.code)
    assert stored == record and stored["v"] == 2
    start = record["start_ns"]
    lines = stored_lines(contract.tenant.code, contract.code, start, start + 1)
    assert lines[record["record_id"]] == canonical_bytes(record)


def test_v1_records_still_pass_beside_v2(
    client: Client, contract: Contract, executor: SigningAgent, router: SigningAgent
) -> None:
    records = [executor.record(contract), routed(executor, router, contract)]
    response = post(client, executor.batch(records).body())
    assert response.json()["accepted"] == 2
    assert [record_of(r["record_id"], None)["v"] for r in records] == [1, 2]  # type: ignore[index]


def test_forged_or_unaccountable_routing_is_refused(
    client: Client, contract: Contract, executor: SigningAgent, router: SigningAgent
) -> None:
    stranger, _ = generate_keypair()
    other = ContractFactory.create()
    unbound = signing_agent(other, agent_id="l1-b", kind="router")
    plain = signing_agent(contract, agent_id="exec-b")  # an executor's key is no router's key

    more_tokens = routed(executor, router, contract)
    more_tokens["tokens_out"] += 1  # changed after the executor signed
    assert refusal(answer(client, executor, more_tokens)) == ("executor_signature_invalid", "executor_sig")
    forged = routed(executor, router, contract, signer=stranger)  # the router's key id, another key
    assert refusal(answer(client, executor, forged)) == ("unknown_router_key", "decision.key_id")
    resigned = routed(executor, router, contract, after_signing={"subtree": "medical"})
    assert refusal(answer(client, executor, resigned)) == ("decision_signature_invalid", "decision")
    assert refusal(answer(client, executor, routed(executor, plain, contract))) == (
        "unknown_router_key",
        "decision.key_id",
    )
    assert refusal(answer(client, executor, routed(executor, unbound, contract))) == (
        "router_not_bound",
        "decision.claims.router",
    )
    revoke_key(router.key_row.key_id)
    assert refusal(answer(client, executor, routed(executor, router, contract))) == (
        "router_key_revoked",
        "decision.key_id",
    )
