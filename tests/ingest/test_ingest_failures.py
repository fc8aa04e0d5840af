"""A failure at every step of ingest_batch, then the agent's retry: both stores and the log agree exactly.

Each failure is real, raised by PostgreSQL or ClickHouse on the real code path: a table renamed away
(a read fails), a trigger that refuses a write, a deferred constraint trigger that refuses the COMMIT,
a ClickHouse CHECK constraint that refuses the insert. These tests commit for real (transaction=True),
so the commit itself can fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from functools import partial
from typing import Any

import pytest
from django.test import Client

from ingest.models import IngestBatch, PendingInsert, RejectedRecord, SequenceGap
from ingest.outbox import store_pending
from ingest.services import ingest_batch
from ledger.models import LogLeaf, LogNode
from tests.billing.concurrency import at_once
from tests.factories import ContractFactory, SigningAgent, signing_agent
from tests.ingest.support import (
    assert_stores_agree,
    post,
    refused_commit,
    refused_store_insert,
    refused_write,
    stored_ids,
    table_away,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("clickhouse")]

# (step, the failure, whether the PostgreSQL side has committed when it strikes)
STEPS: list[tuple[str, Callable[[], AbstractContextManager[None]], bool]] = [
    ("after the parse: the agent key read", lambda: table_away("agents_agentkey"), False),
    ("validation: the log's record ids read", lambda: table_away("ledger_logleaf"), False),
    ("the sequence ranges", lambda: refused_write("ingest_sequencerange", "INSERT"), False),
    ("the sequence gap", lambda: refused_write("ingest_sequencegap", "INSERT"), False),
    ("the answer", lambda: refused_write("ingest_ingestbatch", "INSERT"), False),
    ("the rejections", lambda: refused_write("ingest_rejectedrecord", "INSERT"), False),
    ("the signed batch", lambda: refused_write("ledger_logbatch", "INSERT"), False),
    ("the leaves (COPY)", lambda: refused_write("ledger_logleaf", "INSERT"), False),
    ("the tree nodes", lambda: refused_write("ledger_lognode", "INSERT"), False),
    ("the log head", lambda: refused_write("ledger_logstate", "UPDATE"), False),
    ("the outbox row", lambda: refused_write("ingest_pendinginsert", "INSERT"), False),
    ("the commit", refused_commit, False),
    ("the ClickHouse insert", refused_store_insert, True),
    (
        "after the ClickHouse insert: the outbox delete",
        lambda: refused_write("ingest_pendinginsert", "DELETE"),
        True,
    ),
]


@pytest.fixture
def world() -> tuple[Any, SigningAgent, bytes]:
    """An agent with 3 records logged, and its next batch: 20 records after a gap of two seqs (a new
    gap, 16+ leaves so a tree node is stored) and one record for another tenant's contract (a rejection)."""
    contract = ContractFactory.create()
    agent = signing_agent(contract)
    assert ingest_batch(agent.batch([agent.record(contract) for _ in range(3)]).body()).status == 200
    agent.next_seq = 5
    records = [agent.record(contract) for _ in range(20)] + [agent.record(ContractFactory.create())]
    return contract, agent, agent.batch(records).body()


@pytest.mark.parametrize("step,failure,committed", STEPS, ids=[s[0] for s in STEPS])
def test_a_failure_at_each_step_then_the_retry_leaves_the_stores_agreeing(
    live_client: Client,
    world: tuple[Any, SigningAgent, bytes],
    step: str,
    failure: Callable[[], AbstractContextManager[None]],
    committed: bool,
) -> None:
    _, _, body = world
    with failure():
        first = post(live_client, body)
    if committed:
        assert first.status_code == 200, (step, first.content)
        assert PendingInsert.objects.count() == 1 and IngestBatch.objects.count() == 2
    else:
        assert first.status_code == 503, (step, first.content)
        assert first.json()["code"] == "storage_unavailable"
        assert IngestBatch.objects.count() == 1 and not PendingInsert.objects.exists()
        assert LogLeaf.objects.count() == 3 and len(stored_ids()) == 3
    retry = post(live_client, body)
    assert retry.status_code == 200, (step, retry.content)
    assert (retry.json()["accepted"], retry.json()["rejected"], retry.json()["duplicate"]) == (20, 1, 0)
    if committed:
        assert retry.json() == first.json()
    store_pending()  # the beat task's drain
    assert assert_stores_agree() == 23
    assert LogNode.objects.filter(level=4).exists()
    assert SequenceGap.objects.filter(first_missing=3, last_missing=4, closed_at=None).count() == 1
    assert RejectedRecord.objects.get().code == "not_bound"


@pytest.fixture
def live_client() -> Client:
    return Client()


def test_concurrent_batches_of_two_agents_with_one_record_id_store_it_once() -> None:
    contract = ContractFactory.create()
    agents = [signing_agent(contract, agent_id=f"agent-{n}") for n in range(2)]
    for round_ in range(3):
        shared = agents[0].record(contract)["record_id"]
        bodies = iter(
            [a.batch([a.record(contract, record_id=shared), a.record(contract)]).body() for a in agents]
        )
        answers = at_once(partial(_ingest_next, bodies), threads=2)
        codes = sorted(r["code"] for answer in answers for r in answer["rejections"])
        assert codes == ["record_id_reused"], (round_, answers)
        assert sorted(answer["accepted"] for answer in answers) == [1, 2]
    assert assert_stores_agree() == 9


def _ingest_next(bodies: Iterator[bytes]) -> dict[str, Any]:
    return ingest_batch(next(bodies)).body
