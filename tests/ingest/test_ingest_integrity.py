"""Ingest's integrity on the public path: rejections that never fail on the input they reject, one
record id per record, the JSON limits of `outcome`, and control characters refused in identifiers."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.test import Client

from ingest.models import IngestBatch, RejectedRecord
from ingest.rejections import REJECTED_ID_MAX
from tests.factories import ContractFactory, SigningAgent, signing_agent
from tests.ingest.support import assert_stores_agree, logged_ids, post, signed
from treemeter_records.limits import FIELD_PATH_MAX, JSON_MAX_DEPTH, RECORD_ID_LENGTH

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


@pytest.fixture
def contract() -> Any:
    return ContractFactory.create()


@pytest.fixture
def agent(contract: Any) -> SigningAgent:
    return signing_agent(contract)


@pytest.mark.parametrize("length", [37, 64, 65, 5000])
def test_a_long_record_id_is_rejected_alone_and_kept_as_its_hash(
    client: Client, contract: Any, agent: SigningAgent, length: int
) -> None:
    records = [agent.record(contract) for _ in range(3)]
    bad_id = "0" * length
    records[1]["record_id"] = bad_id
    response = post(client, signed(agent, records))
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["accepted"], body["rejected"]) == (2, 1)
    kept = "sha256:" + hashlib.sha256(bad_id.encode()).hexdigest()
    assert body["rejections"][0]["record_id"] == kept
    assert len(kept) == REJECTED_ID_MAX
    assert RejectedRecord.objects.get().record_id == kept
    assert assert_stores_agree() == 2


def test_a_record_id_that_fits_is_kept_as_sent(client: Client, contract: Any, agent: SigningAgent) -> None:
    record = agent.record(contract)
    record["record_id"] = "not-a-uuid-but-short"
    post(client, signed(agent, [record, agent.record(contract)]))
    assert RejectedRecord.objects.get().record_id == "not-a-uuid-but-short"
    assert len("not-a-uuid-but-short") <= RECORD_ID_LENGTH


@pytest.mark.parametrize("key", ["\x00", "k" * 300, "é\x07" * 40])
def test_an_unknown_key_that_no_column_could_hold_is_still_a_clean_rejection(
    client: Client, contract: Any, agent: SigningAgent, key: str
) -> None:
    record = agent.record(contract)
    record[key] = 1
    response = post(client, signed(agent, [record, agent.record(contract)]))
    assert response.status_code == 200, response.content
    rejected = RejectedRecord.objects.get()
    assert rejected.code == "unknown_field"
    assert rejected.field.isprintable() and len(rejected.field) <= FIELD_PATH_MAX
    assert "\x00" not in rejected.message
    assert assert_stores_agree() == 1


def test_a_nul_in_client_request_id_is_refused(client: Client, contract: Any, agent: SigningAgent) -> None:
    record = agent.record(contract)
    record["client_request_id"] = "req\x00-1"
    response = post(client, signed(agent, [record]))
    assert response.status_code == 422, response.content
    [problem] = response.json()["rejections"]
    assert (problem["code"], problem["field"]) == ("invalid_value", "client_request_id")
    assert assert_stores_agree() == 0


def test_outcome_deeper_than_the_json_limit_is_rejected(
    client: Client, contract: Any, agent: SigningAgent
) -> None:
    deep: dict[str, Any] = {"value": "1.00"}
    for _ in range(JSON_MAX_DEPTH):
        deep = {"a": deep}
    good = agent.record(contract)
    bad = agent.record(contract)
    bad["outcome"] = deep
    response = post(client, signed(agent, [good, bad]))
    body = response.json()
    assert (body["accepted"], body["rejected"]) == (1, 1)
    assert (body["rejections"][0]["code"], body["rejections"][0]["field"]) == ("invalid_value", "outcome")
    assert logged_ids() == [good["record_id"]]


def test_record_ids_resent_under_new_seqs_are_refused_every_time(
    client: Client, contract: Any, agent: SigningAgent
) -> None:
    """The adversarial run: 200 records, then the same records re-signed under new seqs, five times."""
    records = [agent.record(contract) for _ in range(40)]
    assert post(client, agent.batch(records).body()).json()["accepted"] == 40
    for round_ in range(5):
        copies = [{**r, "seq": 1000 * (round_ + 1) + i} for i, r in enumerate(records)]
        body = post(client, agent.batch(copies).body()).json()
        assert body["code"] == "all_records_rejected"
        assert {r["code"] for r in body["rejections"]} == {"record_id_reused"}
        assert body["rejections"][0]["message"] == (
            f"record id {records[0]['record_id']} is already stored under agent {agent.agent_id} seq 0."
        )
    assert assert_stores_agree() == 40
    assert RejectedRecord.objects.filter(code="record_id_reused").count() == 200


def test_a_record_id_stored_by_another_agent_is_refused(client: Client, contract: Any) -> None:
    first = signing_agent(contract, agent_id="agent-a")
    second = signing_agent(contract, agent_id="agent-b")
    record = first.record(contract)
    post(client, first.batch([record]).body())
    copy = {**second.record(contract), "record_id": record["record_id"]}
    body = post(client, second.batch([copy, second.record(contract)]).body()).json()
    assert (body["accepted"], body["rejected"]) == (1, 1)
    assert body["rejections"][0]["code"] == "record_id_reused"
    assert assert_stores_agree() == 2


def test_a_replayed_batch_is_still_a_duplicate_not_a_reuse(
    client: Client, contract: Any, agent: SigningAgent
) -> None:
    records = [agent.record(contract) for _ in range(3)]
    post(client, agent.batch(records[:2]).body())
    body = post(client, agent.batch(records).body()).json()  # seqs 0, 1 again, plus 2
    assert (body["accepted"], body["duplicate"], body["rejected"]) == (1, 2, 0)
    assert IngestBatch.objects.count() == 2
    assert assert_stores_agree() == 3
