"""/v1/ledger/...: checkpoints, proofs and completeness over real ingested data, tenant by tenant."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from ledger.models import Checkpoint, LogLeaf
from ledger.services import publish_checkpoint
from tests.factories import ContractFactory, signing_agent
from tests.ledger.support import member_client, send, staff_client
from treemeter_records import canonical_bytes
from treemeter_records.merkle import leaf_hash, merkle_root
from treemeter_verify.merkle import root_from_inclusion, verify_consistency
from treemeter_verify.note import open_checkpoint, parse_verifier_key

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


def b64d(text: str) -> bytes:
    return base64.b64decode(text)


@pytest.fixture
def two_tenants(client: Client) -> tuple[Any, Any, list[dict[str, Any]]]:
    """Tenants A and B served by one agent, their records interleaved in the log."""
    a, b = ContractFactory.create(), ContractFactory.create()
    agent = signing_agent(a, b)
    records = [agent.record(a if i % 3 else b) for i in range(9)]
    send(client, agent, records[:4])
    send(client, agent, records[4:])
    return a, b, records


def test_inclusion_proofs_lead_to_the_signed_root(two_tenants: Any) -> None:
    a, _, records = two_tenants
    checkpoint = publish_checkpoint(Checkpoint.Reason.MANUAL)
    customer = member_client(a, "alice")
    for index, record in enumerate(records):
        if record["tenant"] != a.tenant.code:
            continue
        response = customer.get(f"/v1/ledger/records/{record['record_id']}/inclusion")
        assert response.status_code == 200, response.content
        proof = response.json()
        assert (proof["leaf_index"], proof["tree_size"], proof["checkpoint"]) == (index, 9, checkpoint.note)
        leaf = leaf_hash(canonical_bytes(record))
        assert b64d(proof["leaf_hash"]) == leaf
        root = root_from_inclusion(index, 9, leaf, [b64d(h) for h in proof["proof"]])
        assert root == bytes(checkpoint.root_hash)


def test_a_tenant_never_gets_proofs_or_exports_of_another_tenant(two_tenants: Any) -> None:
    a, b, records = two_tenants
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    alice = member_client(a, "alice")
    foreign = next(r for r in records if r["tenant"] == b.tenant.code)
    response = alice.get(f"/v1/ledger/records/{foreign['record_id']}/inclusion")
    assert (response.status_code, response.json()["code"]) == (404, "unknown_record")
    staff = staff_client()
    assert staff.get(f"/v1/ledger/records/{foreign['record_id']}/inclusion").status_code == 200
    from django.contrib.auth.models import User

    nobody = Client()
    nobody.force_login(User.objects.create_user(username="nobody", password="pw"))
    response = nobody.get(f"/v1/ledger/records/{foreign['record_id']}/inclusion")
    assert (response.status_code, response.json()["code"]) == (403, "no_tenant")
    assert Client().get(f"/v1/ledger/records/{foreign['record_id']}/inclusion").status_code == 401


def test_proofs_hold_only_hashes_of_other_tenants_records(two_tenants: Any) -> None:
    a, b, records = two_tenants
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    own = next(r for r in records if r["tenant"] == a.tenant.code)
    body = member_client(a, "alice").get(f"/v1/ledger/records/{own['record_id']}/inclusion").content
    assert b.tenant.code.encode() not in body and b.code.encode() not in body
    foreign_ids = [r["record_id"].encode() for r in records if r["tenant"] == b.tenant.code]
    assert not any(record_id in body for record_id in foreign_ids)


def test_consistency_proof_between_two_checkpoints(client: Client) -> None:
    contract = ContractFactory.create()
    agent = signing_agent(contract)
    send(client, agent, [agent.record(contract) for _ in range(6)])
    old = publish_checkpoint(Checkpoint.Reason.MANUAL)
    send(client, agent, [agent.record(contract) for _ in range(7)])
    new = publish_checkpoint(Checkpoint.Reason.MANUAL)
    viewer = member_client(contract, "carol")
    response = viewer.get("/v1/ledger/consistency", {"from": 6, "to": 13})
    assert response.status_code == 200, response.content
    proof = response.json()
    assert (proof["from_size"], proof["to_size"], len(proof["proof"])) == (6, 13, 4)
    verify_consistency(6, 13, bytes(old.root_hash), bytes(new.root_hash), [b64d(h) for h in proof["proof"]])
    assert proof["from_checkpoint"] == old.note and proof["to_checkpoint"] == new.note
    assert viewer.get("/v1/ledger/consistency", {"from": 13, "to": 6}).json()["code"] == "sizes_reversed"
    assert viewer.get("/v1/ledger/consistency", {"from": 5, "to": 12}).json()["code"] == "no_checkpoint"
    assert viewer.get("/v1/ledger/consistency", {"from": "x", "to": "13"}).status_code == 400


def test_anyone_reads_the_checkpoints_and_proves_consistency_from_any_size(client: Client) -> None:
    """No sign-in: the latest checkpoint as its C2SP note (text/plain), the checkpoint list and detail,
    and a consistency proof from any size up to a checkpoint's, 0 (empty) and the size itself included,
    each verified against the root of the log's first leaves, computed here from the stored leaf hashes."""
    contract = ContractFactory.create()
    agent = signing_agent(contract)
    anyone = Client()
    assert anyone.get("/v1/ledger/checkpoint").json()["code"] == "no_checkpoint"
    send(client, agent, [agent.record(contract) for _ in range(9)])
    latest = publish_checkpoint(Checkpoint.Reason.MANUAL)
    answer = anyone.get("/v1/ledger/checkpoint")
    assert answer.status_code == 200 and answer["Content-Type"] == "text/plain; charset=utf-8"
    assert answer.content.decode() == latest.note
    assert anyone.get("/v1/ledger/checkpoints").json()["results"][0]["note"] == latest.note
    assert anyone.get(f"/v1/ledger/checkpoints/{latest.size}").json()["size"] == 9
    leaves = [bytes(h) for h in LogLeaf.objects.order_by("index").values_list("leaf_hash", flat=True)]
    for old in range(0, 10):
        response = anyone.get("/v1/ledger/consistency", {"from": old, "to": 9})
        assert response.status_code == 200, response.content
        proof = response.json()
        assert (proof["from_size"], proof["from_checkpoint"]) == (old, latest.note if old == 9 else None)
        hashes = [b64d(h) for h in proof["proof"]]
        if old in (0, 9):
            assert hashes == []
            continue
        verify_consistency(old, 9, merkle_root(leaves[:old]), bytes(latest.root_hash), hashes)
    assert anyone.get("/v1/ledger/consistency", {"from": 10, "to": 9}).json()["code"] == "sizes_reversed"
    assert anyone.post("/v1/ledger/checkpoints").status_code in (401, 403)  # publishing stays staff's


def test_checkpoints_are_listed_and_published_by_staff_only(client: Client) -> None:
    contract = ContractFactory.create()
    agent = signing_agent(contract)
    send(client, agent, [agent.record(contract) for _ in range(2)])
    customer = member_client(contract, "dave")
    response = customer.post("/v1/ledger/checkpoints")
    assert (response.status_code, response.json()["code"]) == (403, "permission_denied")
    staff = staff_client()
    created = staff.post("/v1/ledger/checkpoints")
    assert created.status_code == 201 and created.json()["size"] == 2
    listed = customer.get("/v1/ledger/checkpoints").json()["results"]
    assert [(c["size"], c["reason"]) for c in listed] == [(2, "manual")]
    assert customer.get("/v1/ledger/checkpoints/2").json()["note"] == listed[0]["note"]
    assert customer.get("/v1/ledger/checkpoints/3").json()["code"] == "no_checkpoint"


def test_a_record_logged_after_the_checkpoint_is_not_yet_provable(client: Client) -> None:
    contract = ContractFactory.create()
    agent = signing_agent(contract)
    send(client, agent, [agent.record(contract)])
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    late = agent.record(contract)
    send(client, agent, [late])
    response = member_client(contract, "erin").get(f"/v1/ledger/records/{late['record_id']}/inclusion")
    assert (response.status_code, response.json()["code"]) == (409, "not_yet_checkpointed")
    assert LogLeaf.objects.count() == 2


def test_completeness_report_and_gap_events_for_staff(client: Client) -> None:
    contract = ContractFactory.create()
    agent = signing_agent(contract)
    send(client, agent, [agent.record(contract, seq=s) for s in (0, 1, 2)])
    send(client, agent, [agent.record(contract, seq=s) for s in (6, 7)])
    staff = staff_client()
    now = datetime.now(UTC)
    period = {"start": (now - timedelta(hours=1)).isoformat(), "end": (now + timedelta(hours=1)).isoformat()}
    report = staff.get("/v1/ledger/agents/agent-1/completeness", period).json()
    assert report == {
        "agent_id": "agent-1",
        "batches": 2,
        "first_seq": 0,
        "last_seq": 7,
        "ranges": [[0, 2], [6, 7]],
        "gaps": [[3, 5]],
        "missing": 3,
        "complete": False,
    }
    assert staff.get("/v1/ledger/agents/agent-1/completeness", {"start": "yesterday"}).status_code == 400
    assert staff.get("/v1/ledger/agents/nope/completeness", period).status_code == 404
    events = staff.get("/v1/ledger/events").json()["results"]
    assert [(e["kind"], e["payload"]["first_missing"], e["payload"]["last_missing"]) for e in events] == [
        ("ledger.sequence_gap", 3, 5)
    ]
    assert member_client(contract, "fay").get("/v1/ledger/events").status_code == 403


def test_the_checkpoint_key_is_public_as_a_verifier_key_and_by_its_two_ids(two_tenants: Any) -> None:
    """No sign-in: a witness pins the C2SP verifier key it answers and opens a real checkpoint with the
    verifier's own parser; the note key hash leads the checkpoint's signature blob, and the record
    format's key id names the same key as the entitlement snapshots do."""
    checkpoint = publish_checkpoint(Checkpoint.Reason.MANUAL)
    response = Client().get("/v1/ledger/checkpoint-key")
    assert response.status_code == 200, response.content
    keys = response.json()
    pinned = parse_verifier_key(keys["note_verifier_key"])
    opened = open_checkpoint(checkpoint.note, pinned)
    assert (opened.origin, opened.size, opened.root_hash) == (
        keys["origin"],
        checkpoint.size,
        bytes(checkpoint.root_hash),
    )
    blob = base64.b64decode(checkpoint.note.rstrip("\n").rsplit(" ", 1)[1])
    assert blob[:4].hex() == keys["note_key_hash"] == keys["note_verifier_key"].split("+")[1]
    platform_key = Client().get("/v1/entitlements/platform-key").json()
    assert (keys["key_id"], keys["public_key"]) == (platform_key["key_id"], platform_key["public_key"])
    assert keys["key_id"].startswith("ed25519:") and keys["note_key_hash"] not in keys["key_id"]
