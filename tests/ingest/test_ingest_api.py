"""POST /v1/ingest/batches on real PostgreSQL and the real ClickHouse engine."""

from __future__ import annotations

import base64
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from django.test import Client

from agents.services import revoke_key
from clickhouse_store import query
from ingest.models import IngestBatch, PendingInsert, RejectedRecord, SequenceGap, SequenceRange
from ingest.outbox import store_pending
from tests.factories import ContractFactory, SigningAgent, signing_agent
from tests.ingest.support import signed
from treemeter_records import build_batch, private_key_from_seed

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
URL = "/v1/ingest/batches"


def post(client: Client, body: bytes, content_type: str = "application/x-ndjson") -> Any:
    return client.post(URL, data=body, content_type=content_type)


def stored_count() -> int:
    return query.select(f"SELECT count() FROM {query.RECORDS}")[0][0]


@pytest.fixture
def contract() -> Any:
    return ContractFactory()


@pytest.fixture
def agent(contract: Any) -> SigningAgent:
    return signing_agent(contract)


def test_accepts_a_signed_batch_and_stores_each_record_once(
    client: Client, contract: Any, agent: SigningAgent
) -> None:
    records = [agent.record(contract) for _ in range(5)]
    response = post(client, agent.batch(records).body())
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["accepted"], body["duplicate"], body["rejected"]) == (5, 0, 0)
    rows = query.select(
        f"SELECT toString(record_id), seq, tokens_in, l3_latency_us FROM {query.RECORDS} ORDER BY seq"
    )
    assert [(r[0], r[1]) for r in rows] == [(rec["record_id"], rec["seq"]) for rec in records]
    assert all(r[2] == 100 and r[3] == 90_000 for r in rows)
    assert list(SequenceRange.objects.values_list("first_seq", "last_seq")) == [(0, 4)]


def test_replay_returns_the_same_answer_and_stores_nothing_twice(
    client: Client, contract: Any, agent: SigningAgent
) -> None:
    body = agent.batch([agent.record(contract) for _ in range(3)]).body()
    first = post(client, body)
    second = post(client, body)
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert stored_count() == 3
    assert IngestBatch.objects.count() == 1


def test_records_resent_in_a_new_batch_are_duplicates(
    client: Client, contract: Any, agent: SigningAgent
) -> None:
    records = [agent.record(contract) for _ in range(4)]
    post(client, agent.batch(records[:3]).body())
    response = post(client, agent.batch(records[1:]).body())  # seqs 1, 2 again, plus 3
    assert (response.json()["accepted"], response.json()["duplicate"]) == (1, 2)
    assert stored_count() == 4


def test_a_different_record_under_a_stored_seq_is_rejected(
    client: Client, contract: Any, agent: SigningAgent
) -> None:
    post(client, agent.batch([agent.record(contract, seq=0)]).body())
    response = post(
        client, agent.batch([agent.record(contract, seq=0), agent.record(contract, seq=1)]).body()
    )
    body = response.json()
    assert (body["accepted"], body["rejected"]) == (1, 1)
    assert body["rejections"][0]["code"] == "seq_conflict"
    assert stored_count() == 2


def test_a_sequence_gap_is_recorded_and_closed_when_filled(
    client: Client, contract: Any, agent: SigningAgent
) -> None:
    records = [agent.record(contract) for _ in range(6)]
    post(client, agent.batch(records[:2]).body())
    post(client, agent.batch(records[4:]).body())
    gap = SequenceGap.objects.get()
    assert (gap.first_missing, gap.last_missing, gap.closed_at) == (2, 3, None)
    post(client, agent.batch(records[2:4]).body())
    gap.refresh_from_db()
    assert gap.closed_at is not None
    assert list(SequenceRange.objects.values_list("first_seq", "last_seq")) == [(0, 5)]


def test_partly_rejected_batch_stores_the_good_records(
    client: Client, contract: Any, agent: SigningAgent
) -> None:
    foreign = ContractFactory.create()
    records = [agent.record(contract), agent.record(foreign), agent.record(contract)]
    response = post(client, agent.batch(records).body())
    assert response.status_code == 200
    body = response.json()
    assert (body["accepted"], body["rejected"]) == (2, 1)
    assert body["rejections"] == [
        {
            "seq": 1,
            "record_id": records[1]["record_id"],
            "code": "not_bound",
            "field": "tenant",
            "message": body["rejections"][0]["message"],
        }
    ]
    assert RejectedRecord.objects.get().code == "not_bound"
    assert stored_count() == 2


# --- bad input: a 4xx with a machine-readable code, and nothing stored ------------------------------------


def assert_refused(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.content
    assert response.json()["code"] == code
    assert stored_count() == 0


def test_malformed_json_is_refused(client: Client) -> None:
    assert_refused(post(client, b"{not json\n{}"), 400, "malformed_batch")


def test_missing_header_fields_are_refused(client: Client, contract: Any, agent: SigningAgent) -> None:
    batch = agent.batch([agent.record(contract)])
    envelope = orjson.loads(batch.body().split(b"\n")[0])
    del envelope["header"]["merkle_root"]
    body = orjson.dumps(envelope, option=orjson.OPT_SORT_KEYS) + b"\n" + batch.lines[0]
    assert_refused(post(client, body), 400, "malformed_batch")


def test_wrong_types_in_a_record_are_rejected(client: Client, contract: Any, agent: SigningAgent) -> None:
    record = agent.record(contract)
    record["tokens_in"] = "100"
    response = post(client, signed(agent, [record]))
    assert_refused(response, 422, "all_records_rejected")
    assert response.json()["rejections"][0]["code"] == "wrong_type"


def test_negative_token_counts_are_rejected(client: Client, contract: Any, agent: SigningAgent) -> None:
    record = agent.record(contract)
    record["tokens_out"] = -5
    response = post(client, signed(agent, [record]))
    assert_refused(response, 422, "all_records_rejected")
    assert response.json()["rejections"][0]["code"] == "negative_value"


def test_timestamps_in_the_far_future_are_rejected(
    client: Client, contract: Any, agent: SigningAgent
) -> None:
    future = int((datetime.now(UTC) + timedelta(days=365)).timestamp()) * 10**9
    response = post(client, agent.batch([agent.record(contract, start_ns=future)]).body())
    assert_refused(response, 422, "all_records_rejected")
    assert response.json()["rejections"][0]["code"] == "timestamp_out_of_window"


def test_a_record_for_a_foreign_tenant_is_rejected(
    client: Client, contract: Any, agent: SigningAgent
) -> None:
    response = post(client, agent.batch([agent.record(ContractFactory.create())]).body())
    assert_refused(response, 422, "all_records_rejected")
    assert response.json()["rejections"][0]["code"] == "not_bound"


def test_a_forged_byte_anywhere_refuses_the_whole_batch(
    client: Client, contract: Any, agent: SigningAgent
) -> None:
    body = agent.batch([agent.record(contract), agent.record(contract)]).body()
    tampered = body.replace(b'"tokens_in":100', b'"tokens_in":900', 1)
    assert tampered != body
    assert_refused(post(client, tampered), 400, "merkle_mismatch")
    header_tampered = body.replace(b'"count":2', b'"count":3', 1)
    assert post(client, header_tampered).status_code in {400, 401}
    assert stored_count() == 0


def test_a_wrong_signature_is_refused(client: Client, contract: Any, agent: SigningAgent) -> None:
    impostor = SigningAgent(agent.agent_id, private_key_from_seed(os.urandom(32)), agent.key_row)
    batch = impostor.batch([agent.record(contract)])
    envelope = orjson.loads(batch.body().split(b"\n")[0])
    envelope["header"]["key_id"] = agent.key_row.key_id  # claim the registered key, sign with another
    from treemeter_records import sign_header

    envelope["signature"] = sign_header(envelope["header"], impostor.key)
    body = orjson.dumps(envelope, option=orjson.OPT_SORT_KEYS) + b"\n" + batch.lines[0]
    assert_refused(post(client, body), 401, "bad_signature")


def test_an_unknown_agent_is_refused(client: Client, contract: Any) -> None:
    stranger = SigningAgent("agent-unknown", private_key_from_seed(os.urandom(32)), key_row=None)  # type: ignore[arg-type]
    assert_refused(post(client, stranger.batch([stranger.record(contract)]).body()), 401, "unknown_agent")


def test_a_revoked_key_is_refused(client: Client, contract: Any, agent: SigningAgent) -> None:
    revoke_key(agent.key_row.key_id)
    assert_refused(post(client, agent.batch([agent.record(contract)]).body()), 403, "key_revoked")


def test_an_oversized_batch_is_refused(
    client: Client, contract: Any, agent: SigningAgent, settings: Any
) -> None:
    settings.INGEST_MAX_BATCH_BYTES = 2_048
    body = agent.batch([agent.record(contract) for _ in range(4)]).body()
    assert len(body) > 2_048
    assert_refused(post(client, body), 413, "batch_too_large")


def test_too_many_records_are_refused(
    client: Client, contract: Any, agent: SigningAgent, settings: Any
) -> None:
    settings.INGEST_MAX_BATCH_RECORDS = 3
    assert_refused(
        post(client, agent.batch([agent.record(contract) for _ in range(4)]).body()), 413, "batch_too_large"
    )


def test_a_wrong_content_type_is_refused(client: Client, contract: Any, agent: SigningAgent) -> None:
    assert_refused(
        post(client, agent.batch([agent.record(contract)]).body(), "text/plain"),
        415,
        "unsupported_media_type",
    )


def test_the_signing_helper_signs_like_build_batch(contract: Any, agent: SigningAgent) -> None:
    record = agent.record(contract)
    built = build_batch([record], agent.agent_id, agent.key, created_ns=1)
    assert signed(agent, [record]) + b"\n" == built.body()
    assert base64.b64decode(built.signature)


def test_records_wait_in_the_outbox_while_the_store_is_down(
    client: Client, contract: Any, agent: SigningAgent
) -> None:
    query.command("RENAME TABLE usage_records TO usage_records_away")
    try:
        response = post(client, agent.batch([agent.record(contract)]).body())
    finally:
        query.command("RENAME TABLE usage_records_away TO usage_records")
    assert response.status_code == 200 and response.json()["accepted"] == 1
    assert stored_count() == 0 and PendingInsert.objects.count() == 1
    assert store_pending() == 1
    assert stored_count() == 1 and not PendingInsert.objects.exists()
