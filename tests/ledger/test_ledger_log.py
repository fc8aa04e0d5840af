"""The log grows with ingest (exactly once, in order), keeps its strata, and signs only consistent heads."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from billing.models import Invoice
from ingest.models import SequenceGap
from ledger.merkle import fold
from ledger.models import Checkpoint, LedgerEvent, LogBatch, LogLeaf, LogNode, LogState
from ledger.services import CheckpointRefused, publish_checkpoint
from ledger.tasks import publish_checkpoint_task
from tests.factories import ContractFactory, signing_agent
from tests.ledger.support import november_invoice, platform_vkey, priced_contract, send
from treemeter_records import canonical_bytes
from treemeter_records.merkle import leaf_hash, merkle_root
from treemeter_verify.note import open_checkpoint, parse_verifier_key

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


def logged() -> list[tuple[int, str, bytes]]:
    return [
        (i, str(r), bytes(h)) for i, r, h in LogLeaf.objects.values_list("index", "record_id", "leaf_hash")
    ]


def state_root() -> tuple[int, bytes]:
    state = LogState.objects.get(pk=1)
    blob = bytes(state.frontier)
    return state.size, fold([blob[i : i + 32] for i in range(0, len(blob), 32)])


def test_accepted_records_are_logged_once_in_ingest_order(client: Client) -> None:
    contract = ContractFactory.create()
    agent = signing_agent(contract)
    first = [agent.record(contract) for _ in range(3)]
    second = [agent.record(contract) for _ in range(2)]
    batch = agent.batch(first)
    post = lambda body: client.post("/v1/ingest/batches", body, content_type="application/x-ndjson").json()  # noqa: E731
    assert post(batch.body())["accepted"] == 3
    send(client, agent, second)
    assert post(batch.body())["accepted"] == 3  # the exact replay gets the first answer back
    assert send(client, agent, first)["duplicate"] == 3  # re-signed: stored records are duplicates
    records = first + second
    assert logged() == [(i, r["record_id"], leaf_hash(canonical_bytes(r))) for i, r in enumerate(records)]
    assert state_root() == (5, merkle_root([leaf_hash(canonical_bytes(r)) for r in records]))
    stored = LogBatch.objects.get(ingest_batch__header_digest=batch.header_digest)
    assert bytes(stored.header) == batch.header_bytes
    assert bytes(stored.leaf_hashes) == b"".join(leaf_hash(line) for line in batch.lines)
    assert list(LogLeaf.objects.values_list("seq", "position")) == [(0, 0), (1, 1), (2, 2), (3, 0), (4, 1)]


def test_rejected_records_stay_out_of_the_log_but_in_the_signed_batch(client: Client) -> None:
    contract, other = ContractFactory.create(), ContractFactory.create()
    agent = signing_agent(contract)
    records = [agent.record(contract), agent.record(other), agent.record(contract)]
    answer = send(client, agent, records)
    assert (answer["accepted"], answer["rejected"]) == (2, 1)
    assert [r for _, r, _ in logged()] == [records[0]["record_id"], records[2]["record_id"]]
    assert list(LogLeaf.objects.values_list("position", flat=True)) == [0, 2]
    assert len(bytes(LogBatch.objects.get().leaf_hashes)) == 3 * 32


def test_perfect_subtrees_are_stored_every_fourth_level(client: Client) -> None:
    contract = ContractFactory.create()
    agent = signing_agent(contract)
    records = [agent.record(contract) for _ in range(40)]
    send(client, agent, records[:7])
    send(client, agent, records[7:])
    leaves = [leaf_hash(canonical_bytes(r)) for r in records]
    nodes = [
        (lv, i, bytes(h))
        for lv, i, h in LogNode.objects.order_by("level", "index").values_list("level", "index", "hash")
    ]
    assert nodes == [(4, 0, merkle_root(leaves[:16])), (4, 1, merkle_root(leaves[16:32]))]
    assert state_root() == (40, merkle_root(leaves))


def test_a_checkpoint_is_a_c2sp_signed_note_of_the_tree_head(client: Client) -> None:
    contract = ContractFactory.create()
    agent = signing_agent(contract)
    records = [agent.record(contract) for _ in range(6)]
    send(client, agent, records)
    checkpoint = publish_checkpoint(Checkpoint.Reason.MANUAL)
    root = merkle_root([leaf_hash(canonical_bytes(r)) for r in records])
    body, signature = checkpoint.note.split("\n\n")
    import base64

    assert body == f"{settings.LEDGER_ORIGIN}\n6\n{base64.b64encode(root).decode()}"
    assert signature.startswith(f"\u2014 {settings.LEDGER_ORIGIN} ") and signature.endswith("\n")
    opened = open_checkpoint(checkpoint.note, parse_verifier_key(platform_vkey()))
    assert (opened.size, opened.root_hash) == (6, root)


def test_the_platform_refuses_to_sign_a_tree_inconsistent_with_its_last_checkpoint(client: Client) -> None:
    contract = ContractFactory.create()
    agent = signing_agent(contract)
    send(client, agent, [agent.record(contract) for _ in range(5)])
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    send(client, agent, [agent.record(contract) for _ in range(3)])
    # history rewritten under the checkpoint: a logged leaf is replaced
    LogLeaf.objects.filter(index=2).update(leaf_hash=leaf_hash(b"forged"))
    with pytest.raises(CheckpointRefused, match="not consistent with checkpoint 5"):
        publish_checkpoint(Checkpoint.Reason.SCHEDULE)
    assert list(Checkpoint.objects.values_list("size", flat=True)) == [5]


def test_the_platform_refuses_to_sign_a_forked_or_shrunk_head(client: Client) -> None:
    contract = ContractFactory.create()
    agent = signing_agent(contract)
    send(client, agent, [agent.record(contract) for _ in range(4)])
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    state = LogState.objects.get(pk=1)
    real = bytes(state.frontier)
    LogState.objects.filter(pk=1).update(frontier=leaf_hash(b"another tree"))
    with pytest.raises(CheckpointRefused):
        publish_checkpoint(Checkpoint.Reason.SCHEDULE)
    LogState.objects.filter(pk=1).update(frontier=real[:0] + leaf_hash(b"x") + leaf_hash(b"y"), size=3)
    with pytest.raises(CheckpointRefused, match="cannot extend"):
        publish_checkpoint(Checkpoint.Reason.SCHEDULE)
    assert Checkpoint.objects.count() == 1


def test_the_beat_job_publishes_through_the_celery_task(client: Client) -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["ledger-checkpoint"]
    assert entry == {
        "task": "ledger.publish_checkpoint",
        "schedule": settings.LEDGER_CHECKPOINT_MINUTES * 60.0,
    }
    contract = ContractFactory.create()
    agent = signing_agent(contract)
    send(client, agent, [agent.record(contract) for _ in range(2)])
    assert publish_checkpoint_task.delay().get() == 2
    assert list(Checkpoint.objects.values_list("size", "reason")) == [(2, "schedule")]


def test_creating_an_invoice_publishes_a_checkpoint(
    client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    contract = priced_contract()
    agent = signing_agent(contract)
    send(client, agent, [agent.record(contract) for _ in range(3)])
    with django_capture_on_commit_callbacks(execute=True):
        invoice = november_invoice(contract)
    assert list(Checkpoint.objects.values_list("size", "reason", "invoice_id")) == [
        (3, "invoice", invoice.pk)
    ]
    with django_capture_on_commit_callbacks(execute=True):
        Invoice.objects.filter(pk=invoice.pk).get().save(update_fields=["status"])  # not a creation
    assert Checkpoint.objects.count() == 1


def test_a_sequence_gap_raises_one_webhook_event(client: Client) -> None:
    contract = ContractFactory.create()
    agent = signing_agent(contract)
    send(client, agent, [agent.record(contract, seq=s) for s in (0, 1)])
    send(client, agent, [agent.record(contract, seq=s) for s in (5, 6)])
    send(client, agent, [agent.record(contract, seq=9)])
    events = list(LedgerEvent.objects.order_by("id").values_list("kind", "payload"))
    assert [
        (kind, p["agent_id"], p["first_missing"], p["last_missing"], p["missing"]) for kind, p in events
    ] == [
        ("ledger.sequence_gap", "agent-1", 2, 4, 3),
        ("ledger.sequence_gap", "agent-1", 7, 8, 2),
    ]
    send(client, agent, [agent.record(contract, seq=s) for s in (2, 3, 4)])  # the gap closes: no new event
    assert LedgerEvent.objects.count() == 2
    assert list(SequenceGap.objects.filter(closed_at=None).values_list("first_missing", flat=True)) == [7]
