"""The standalone verifier over real ingested data, clean and under each kind of tampering.

Each case ingests through the API, invoices through billing, exports through /v1/ledger, tampers with
one thing, then runs the verifier. The platform's own audit catches the store tampering too.
"""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from accounts.access import PLATFORM
from billing.exports import invoice_for
from clickhouse_store import query
from ledger.models import Checkpoint, LogLeaf
from ledger.notes import CheckpointBody, sign_checkpoint
from ledger.selectors import audit_store
from ledger.services import CheckpointRefused, publish_checkpoint
from tests.factories import SigningAgent, signing_agent
from tests.ledger.support import (
    NOV,
    keys_json,
    member_client,
    november_invoice,
    pinned_keys,
    priced_contract,
    send,
)
from treemeter_records import build_batch, private_key_from_seed
from treemeter_verify import Report, scan, verify_export
from treemeter_verify.check import read_export

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
REPO = Path(__file__).resolve().parents[2]


@dataclass
class World:
    client: Client
    customer: Client
    agent: SigningAgent
    contract: Any
    records: list[dict[str, Any]]
    invoice_id: int = 0

    def export(self, *previous: int) -> tuple[dict[str, Any], Sequence[bytes]]:
        response = self.customer.get(f"/v1/ledger/invoices/{self.invoice_id}/export", {"previous": previous})
        assert response.status_code == 200, response.content
        return read_export(response.content)

    def verify(self, manifest: dict[str, Any], lines: Sequence[bytes], previous: str | None = None) -> Report:
        return verify_export(manifest, lines, pinned_keys(self.agent), previous)


def failing(report: Report) -> dict[str, str]:
    return {v.check: v.detail for v in report.verdicts if not v.ok}


def ingest_world(client: Client, seqs: list[list[int]] | None = None) -> World:
    """Contract A (priced) and contract B of another tenant, one agent, interleaved batches."""
    a, b = priced_contract(), priced_contract()
    agent = signing_agent(a, b)
    records: list[dict[str, Any]] = []
    for batch in seqs or [[0, 1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12, 13, 14]]:
        chunk = [
            agent.record(a if s % 4 else b, seq=s, tokens_in=100 + s, status="ok" if s != 7 else "error")
            for s in batch
        ]
        send(client, agent, chunk)
        records += chunk
    world = World(
        client, member_client(a, "alice"), agent, a, [r for r in records if r["contract"] == a.code]
    )
    world.invoice_id = november_invoice(a).pk
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    return world


def test_an_untampered_invoice_verifies_line_by_line(client: Client) -> None:
    world = ingest_world(client)
    manifest, lines = world.export()
    report = world.verify(manifest, lines)
    assert failing(report) == {}
    verdicts = {v.check: v.detail for v in report.verdicts}
    # contract A holds seqs 1,2,3,5,6,7,9,10,11,13,14; all are billed but 7 (an error)
    assert verdicts["record count"] == "11 records"
    assert verdicts["line usage requests"] == "10 × 0.05 = 0.50 CNY"  # the price frozen in the invoice
    assert verdicts["line usage tokens_in"] == "1074 × 0.0002 = 0.21 CNY"
    assert verdicts["line usage l3_seconds"] == "0.9 × 0.8 = 0.72 CNY"
    assert verdicts["inclusion in checkpoint"] == "11 records proven in the signed log"
    assert verdicts["sequence completeness"] == "no gaps in 1 agents' sequences"


@pytest.mark.parametrize(
    ("tampered", "failed"),
    [
        (None, set()),
        # one record's tokens changed: its run fails as a whole and the per-line loop names it
        ("record", {"batch signatures", "inclusion in checkpoint", "line usage tokens_in"}),
        # one leaf hash of a signed batch changed: the batch's root fails, so do its records' signatures
        ("leaf hash", {"agent batch headers", "batch signatures"}),
        # one batch's signature changed: the batch is invalid, so are its records' signatures
        ("signature", {"agent batch headers", "batch signatures"}),
    ],
)
def test_whole_run_checks_per_line_checks_and_forked_scans_give_the_same_verdicts(
    client: Client, monkeypatch: pytest.MonkeyPatch, tampered: str | None, failed: set[str]
) -> None:
    world = ingest_world(client)
    manifest, exported = world.export()
    lines = list(exported)
    if tampered == "record":
        lines[4] = lines[4].replace(b'"tokens_in":1', b'"tokens_in":2', 1)
    if tampered == "leaf hash":
        batch = manifest["batches"][1]
        blob = bytearray(base64.b64decode(batch["leaf_hashes"]))
        blob[40] ^= 1
        batch["leaf_hashes"] = base64.b64encode(bytes(blob)).decode()
    if tampered == "signature":
        signature = bytearray(base64.b64decode(manifest["batches"][1]["signature"]))
        signature[0] ^= 1
        manifest["batches"][1]["signature"] = base64.b64encode(bytes(signature)).decode()
    keys = pinned_keys(world.agent)

    def verdicts(jobs: int = 1) -> list[tuple[str, bool, str]]:
        return [(v.check, v.ok, v.detail) for v in verify_export(manifest, lines, keys, jobs=jobs).verdicts]

    whole = verdicts()
    monkeypatch.setattr(scan, "LINES_PER_JOB", 1)  # forked root checks and scans, up to 3 processes
    assert verdicts(jobs=3) == whole
    monkeypatch.setattr(scan, "_scan_run", lambda *args: None)  # every run through the per-line loop
    assert verdicts() == whole
    assert {name for name, ok, _ in whole if not ok} == failed
    headers = next(detail for name, _, detail in whole if name == "agent batch headers")
    if tampered == "leaf hash":
        assert headers.endswith(":5-8: records do not hash to the signed merkle root")
    if tampered == "signature":
        assert headers.endswith(":5-8: agent signature does not verify")
    if tampered in ("leaf hash", "signature"):  # the batch's records, the three of contract A
        signatures = next(detail for name, _, detail in whole if name == "batch signatures")
        assert signatures.count("is not covered by a valid agent batch signature") == 3, signatures
    # …, the gray release's (skipped), the lines, the catalogue's (skipped), the fees, true-up and
    # discounts, the totals, the credits
    assert len(whole) == 17


def test_the_export_reveals_only_hashes_of_the_other_tenants_records(client: Client) -> None:
    world = ingest_world(client)
    body = world.customer.get(f"/v1/ledger/invoices/{world.invoice_id}/export").content
    other = [
        r for r in LogLeaf.objects.exclude(contract=world.contract.code).values_list("record_id", "tenant")
    ]
    assert other
    assert not any(str(record_id).encode() in body or tenant.encode() in body for record_id, tenant in other)


def test_the_console_script_prints_verdicts_and_exits_by_outcome(client: Client, tmp_path: Path) -> None:
    world = ingest_world(client)
    response = world.customer.get(f"/v1/ledger/invoices/{world.invoice_id}/export")
    export, keys = tmp_path / "export.ndjson", tmp_path / "keys.json"
    export.write_bytes(response.content)
    keys.write_text(json.dumps(keys_json(world.agent)))
    run = [sys.executable, "-m", "treemeter_verify", str(export), "--keys", str(keys)]
    env = {"PYTHONPATH": str(REPO / "verifier"), "PATH": "/usr/bin:/bin"}
    ok = subprocess.run(run, capture_output=True, text=True, env=env, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "PASS  line usage requests: 10 × 0.05 = 0.50 CNY" in ok.stdout
    assert ok.stdout.splitlines()[-1].startswith("VERIFIED: 11 records")
    export.write_bytes(response.content.replace(b'"tokens_in":101', b'"tokens_in":109'))
    bad = subprocess.run(run, capture_output=True, text=True, env=env, check=False)
    assert bad.returncode == 1 and "FAIL  batch signatures" in bad.stdout
    export.write_bytes(b"not an export")
    unreadable = subprocess.run(run, capture_output=True, text=True, env=env, check=False)
    assert unreadable.returncode == 2 and "cannot verify" in unreadable.stderr


def test_a_gzip_export_is_verified_in_memory_as_it_is(client: Client, tmp_path: Path) -> None:
    world = ingest_world(client)
    url = f"/v1/ledger/invoices/{world.invoice_id}/export"
    plain = world.customer.get(url).content
    packed = world.customer.get(url, {"compress": "gzip"})
    assert packed.status_code == 200 and packed["Content-Type"] == "application/gzip"
    assert gzip.decompress(packed.content) == plain and len(packed.content) < len(plain) / 3
    assert world.verify(*read_export(packed.content)).ok
    export, keys = tmp_path / "export.ndjson.gz", tmp_path / "keys.json"
    export.write_bytes(packed.content)
    keys.write_text(json.dumps(keys_json(world.agent)))
    run = [sys.executable, "-m", "treemeter_verify", str(export), "--keys", str(keys)]
    env = {"PYTHONPATH": str(REPO / "verifier"), "PATH": "/usr/bin:/bin"}
    ok = subprocess.run(run, capture_output=True, text=True, env=env, check=False)
    assert ok.returncode == 0 and ok.stdout.splitlines()[-1].startswith("VERIFIED: 11 records"), ok.stderr
    export.write_bytes(packed.content[: len(packed.content) // 2])  # cut short
    cut = subprocess.run(run, capture_output=True, text=True, env=env, check=False)
    assert cut.returncode == 2 and "the compressed export cannot be read" in cut.stderr
    bad = world.customer.get(url, {"compress": "zip"})
    assert bad.status_code == 400


def test_the_verifier_imports_neither_django_nor_the_platform() -> None:
    code = (
        "import sys, treemeter_verify.cli; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('django', 'treemeter_records', 'ledger')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    env = {"PYTHONPATH": str(REPO / "verifier"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def ch(sql: str, **params: Any) -> None:
    query.command(sql + " SETTINGS mutations_sync = 2", params)


def change_one_byte(world: World) -> None:
    """tokens_out 20 → 21 in one stored record (rewritten in place: delete, then insert the changed row)."""
    record = dict(world.records[3], tokens_out=21)
    delete_record(world)
    query.insert_json_lines("usage_records", json.dumps(record).encode())


def delete_record(world: World) -> None:
    ch("ALTER TABLE usage_records DELETE WHERE record_id = {id:UUID}", id=world.records[3]["record_id"])


def insert_record(world: World) -> None:
    forged = world.agent.record(world.contract, seq=99)
    batch = build_batch([forged], world.agent.agent_id, world.agent.key)
    query.insert_json_lines("usage_records", batch.lines[0])


TAMPER: dict[str, tuple[Callable[[World], None], str, str]] = {
    "change one byte of a stored record": (change_one_byte, "batch signatures", "changed"),
    "delete a stored record": (delete_record, "inclusion in checkpoint", "missing"),
    "insert a record with a valid-looking id": (insert_record, "inclusion in checkpoint", "unlogged"),
}


@pytest.mark.parametrize("case", sorted(TAMPER))
def test_store_tampering_is_detected_by_the_verifier_and_the_platform(client: Client, case: str) -> None:
    world = ingest_world(client)
    tamper, check, audit_key = TAMPER[case]
    tamper(world)
    manifest, lines = world.export()
    problems = failing(world.verify(manifest, lines))
    assert check in problems, problems
    start, end = manifest["invoice"]["period_start_ns"], manifest["invoice"]["period_end_ns"]
    audit = audit_store(world.contract.tenant.code, world.contract.code, start, end)
    assert len(audit[audit_key]) == 1 and sum(len(v) for v in audit.values()) == 1, audit


def test_a_reordered_log_is_detected_by_the_verifier_and_refused_by_the_platform(client: Client) -> None:
    world = ingest_world(client)
    first, second = LogLeaf.objects.get(index=1), LogLeaf.objects.get(index=2)
    LogLeaf.objects.filter(index=1).update(record_id=uuid.uuid4())  # record ids are unique: swap via a third
    LogLeaf.objects.filter(index=2).update(leaf_hash=bytes(first.leaf_hash), record_id=first.record_id)
    LogLeaf.objects.filter(index=1).update(leaf_hash=bytes(second.leaf_hash), record_id=second.record_id)
    manifest, lines = world.export()
    problems = failing(world.verify(manifest, lines))
    assert (
        problems["inclusion in checkpoint"] == "the records and bundle do not lead to the checkpoint's root"
    )
    with pytest.raises(CheckpointRefused):
        publish_checkpoint(Checkpoint.Reason.SCHEDULE)


def test_a_checkpoint_signed_by_another_key_is_refused(client: Client) -> None:
    world = ingest_world(client)
    manifest, lines = world.export()
    real = manifest["checkpoint"]
    size, root = int(real.split("\n")[1]), base64.b64decode(real.split("\n")[2])
    impostor = private_key_from_seed(bytes(range(32)))
    manifest["checkpoint"] = sign_checkpoint(CheckpointBody(settings.LEDGER_ORIGIN, size, root), impostor)
    problems = failing(world.verify(manifest, lines))
    assert problems["checkpoint signature"].startswith(
        "the checkpoint carries no signature of the pinned key"
    )
    assert "inclusion in checkpoint" in problems


def test_a_checkpoint_inconsistent_with_the_saved_one_is_detected(client: Client) -> None:
    world = ingest_world(client)
    saved = Checkpoint.objects.get().note  # the customer keeps this one
    december = 1_796_083_200 * 10**9  # 2026-12-01: outside the invoiced month
    send(client, world.agent, [world.agent.record(world.contract, seq=15, start_ns=december + 10**9)])
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    manifest, lines = world.export(15)
    assert failing(world.verify(manifest, lines, previous=saved)) == {}
    # a forked view: the platform key signed another tree of the same size for someone else
    key = private_key_from_seed(settings.PLATFORM_SIGNING_KEY)
    forked = sign_checkpoint(CheckpointBody(settings.LEDGER_ORIGIN, 15, b"\x07" * 32), key)
    problems = failing(world.verify(manifest, lines, previous=forked))
    assert problems == {
        "consistency with saved checkpoint": "consistency proof does not link the two checkpoints"
    }
    manifest["consistency"] = []
    problems = failing(world.verify(manifest, lines, previous=saved))
    assert problems == {"consistency with saved checkpoint": "no consistency proof from size 15"}


def test_a_sequence_dropped_at_the_agent_is_detected(client: Client) -> None:
    world = ingest_world(client, seqs=[[0, 1, 2, 3, 4], [5, 7, 8], [10, 11, 12]])
    manifest, lines = world.export()
    problems = failing(world.verify(manifest, lines))
    assert problems == {
        "sequence completeness": "agent agent-1 never delivered seq 6-6; "
        "agent agent-1 never delivered seq 9-9; "
        "platform reports agent agent-1 missing seq 6-6; platform reports agent agent-1 missing seq 9-9"
    }


def test_an_invoice_line_that_does_not_match_the_records_fails(client: Client) -> None:
    world = ingest_world(client)
    manifest, lines = world.export()
    for line in manifest["invoice"]["lines"]:
        if line["dimension"] == "requests":
            line["amount"] = "0.56"
        if line["dimension"] == "tokens_in":
            line["quantity"] = "1076"
    problems = failing(world.verify(manifest, lines))
    assert problems == {
        "line usage requests": "amount 0.56 CNY but the contract terms give 0.50 (off by 0.06 CNY)",
        "line usage tokens_in": "quantity 1076 but the records give 1074",
        "invoice totals": "subtotal 1.43 CNY but the lines add up to 1.49",  # one amount changed alone
    }


def test_exports_are_scoped_to_the_tenant(client: Client) -> None:
    world = ingest_world(client)
    other = priced_contract()
    mallory = member_client(other, "mallory")
    response = mallory.get(f"/v1/ledger/invoices/{world.invoice_id}/export")
    assert (response.status_code, response.json()["code"]) == (404, "unknown_invoice")
    assert invoice_for(world.invoice_id, PLATFORM).pk == world.invoice_id
    assert NOV[0].month == 11
