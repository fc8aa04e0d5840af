"""Per-request receipts (issue 21.5) on the platform and in the offline verifier: a receipt checked against
the log (included with its proof, logged, pending, missing after the grace, or logged with another leaf),
a missing record disputed in one call, and ``treemeter-verify receipt`` with the platform's proof or with
an invoice export."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from accounts.models import Role
from billing.models import Dispute
from billing.services import finalize_invoice
from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from tests.factories import ContractFactory, MembershipFactory, SigningAgent, signing_agent
from tests.frontend.support import signed_in
from tests.ledger.support import keys_json, november_invoice, priced_contract, send
from treemeter_records import canonical_bytes, private_key_from_seed
from treemeter_records.receipts import make_receipt, read_receipt
from treemeter_verify.cli import main as verify

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
NOV_15_NS = int(datetime(2026, 11, 15, tzinfo=UTC).timestamp()) * 10**9


def _check(client: Client, receipt: str) -> Any:
    return client.post("/v1/ledger/receipts/check", {"receipt": receipt}, content_type="application/json")


def _dispute(client: Client, receipt: str) -> Any:
    return client.post("/v1/ledger/receipts/dispute", {"receipt": receipt}, content_type="application/json")


@pytest.fixture
def served() -> tuple[Any, SigningAgent, list[dict[str, Any]], list[str]]:
    """Three November requests receipted by their agent; the first two logged, the third never shipped.
    November's invoice is final and a checkpoint covers the log."""
    contract = priced_contract()
    agent = signing_agent(contract, agent_id="gpu-receipts")
    records = [agent.record(contract, start_ns=NOV_15_NS + i * 10**9) for i in range(3)]
    send(Client(), agent, records[:2])
    finalize_invoice(november_invoice(contract))
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    return contract, agent, records, [agent.receipt(r) for r in records]


def test_a_logged_receipt_comes_back_with_its_record_and_inclusion_proof(served: Any) -> None:
    contract, _, records, receipts = served
    reader = signed_in(MembershipFactory.create(tenant=contract.tenant, role=Role.READ_ONLY).user)
    answer = _check(reader, receipts[0])
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["status"] == "included"
    assert body["line"] == canonical_bytes(records[0]).decode()
    assert hashlib.sha256(b"\x00" + body["line"].encode()).hexdigest() == body["claims"]["leaf_hash"]
    assert body["record"]["record_id"] == records[0]["record_id"]
    inclusion = body["inclusion"]
    assert (inclusion["leaf_index"], inclusion["tree_size"]) == (0, 2)
    assert base64.b64decode(inclusion["leaf_hash"]).hex() == body["claims"]["leaf_hash"]
    assert inclusion["checkpoint"].startswith("treemeter")
    assert body["grace_ends"] == "2026-12-01T00:00:00+00:00"  # November's end, no grace days
    assert _check(reader, receipts[2]).json()["status"] == "missing"


def test_a_receipt_after_the_latest_checkpoint_is_logged_and_this_months_is_pending(served: Any) -> None:
    contract, agent, _, _ = served
    owner = signed_in(MembershipFactory.create(tenant=contract.tenant).user)
    later = agent.record(contract, start_ns=NOV_15_NS + 60 * 10**9)
    send(Client(), agent, [later])  # logged, after the checkpoint
    answer = _check(owner, agent.receipt(later)).json()
    assert (answer["status"], answer["inclusion"]) == ("logged", None)
    assert answer["line"] == canonical_bytes(later).decode()
    now = agent.record(contract, start_ns=time.time_ns())  # this month: its grace still runs
    pending = _check(owner, agent.receipt(now)).json()
    assert (pending["status"], pending["record"]) == ("pending", None)
    refused = _dispute(owner, agent.receipt(now))
    assert (refused.status_code, refused.json()["code"]) == (409, "receipt_not_evidence")
    assert "pending (grace ends" in refused.json()["message"]


def test_a_receipt_whose_leaf_differs_from_the_log_is_a_mismatch(served: Any) -> None:
    contract, agent, records, _ = served
    owner = signed_in(MembershipFactory.create(tenant=contract.tenant).user)
    promised = copy.deepcopy(records[1])
    promised["tokens_in"] += 1  # the agent receipted other usage than the log holds for this record id
    assert _check(owner, agent.receipt(promised)).json()["status"] == "mismatch"


def test_bad_receipts_are_refused_and_another_tenants_is_not_found(served: Any) -> None:
    contract, agent, records, receipts = served
    owner = signed_in(MembershipFactory.create(tenant=contract.tenant).user)
    for token, message in [
        ("not a receipt", "base64url of a JSON object"),
        (base64.urlsafe_b64encode(b'{"claims": {}}').decode(), "exactly claims, key_id and sig"),
        (
            make_receipt(private_key_from_seed(b"\x01" * 32), records[0], canonical_bytes(records[0])),
            "is not a key of that agent",
        ),
    ]:
        answer = _check(owner, token)
        assert (answer.status_code, answer.json()["code"]) == (400, "invalid_receipt"), token
        assert message in answer.json()["message"]
    envelope = json.loads(base64.urlsafe_b64decode(receipts[0] + "=="))
    envelope["claims"]["seq"] = 7  # a claim changed after signing
    forged = base64.urlsafe_b64encode(canonical_bytes(envelope)).decode()
    assert _check(owner, forged).json()["message"] == "The receipt's signature does not verify."
    elsewhere = ContractFactory.create(tenant=contract.tenant)  # the tenant's, but not the agent's
    unbound = agent.receipt({**records[0], "contract": elsewhere.code})
    assert (
        _check(owner, unbound).json()["message"]
        == f"Agent gpu-receipts does not serve contract {elsewhere.code}."
    )
    stranger = signed_in(MembershipFactory.create(tenant=ContractFactory.create().tenant).user)
    answer = _check(stranger, receipts[0])
    assert (answer.status_code, answer.json()["code"]) == (404, "unknown_receipt")
    assert _dispute(stranger, receipts[2]).status_code == 404


def test_a_missing_record_is_disputed_in_one_call_with_the_receipt_as_evidence(served: Any) -> None:
    contract, _, records, receipts = served
    billing = signed_in(MembershipFactory.create(tenant=contract.tenant, role=Role.BILLING).user)
    reader = signed_in(MembershipFactory.create(tenant=contract.tenant, role=Role.READ_ONLY).user)
    assert _dispute(reader, receipts[2]).status_code == 403
    opened = _dispute(billing, receipts[2])
    assert opened.status_code == 201, opened.content
    dispute = Dispute.objects.get(pk=opened.json()["id"])
    assert (dispute.tenant, dispute.status, dispute.invoice.period_start.month) == (
        contract.tenant,
        "open",
        11,
    )
    assert dispute.evidence["receipt"]["status"] == "missing"
    assert dispute.evidence["receipt"]["claims"] == read_receipt(receipts[2]).claims
    assert f"record {records[2]['record_id']} (agent gpu-receipts, seq 2)" in dispute.reason
    assert "is not in the log after the grace period" in dispute.reason
    again = _dispute(billing, receipts[2])
    assert (again.status_code, again.json()["code"]) == (409, "dispute_open")
    logged = _dispute(billing, receipts[0])
    assert (logged.status_code, logged.json()["code"]) == (409, "receipt_not_evidence")
    assert Dispute.objects.count() == 1


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = verify(["receipt", *argv])
    return code, capsys.readouterr().out


def test_treemeter_verify_checks_a_receipt_with_the_platforms_proof_or_an_export(
    served: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    contract, agent, records, receipts = served
    owner = signed_in(MembershipFactory.create(tenant=contract.tenant).user)
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(keys_json(agent)))
    proof = tmp_path / "proof.json"
    proof.write_bytes(_check(owner, receipts[1]).content)
    token = tmp_path / "receipt.txt"
    token.write_text(receipts[1] + "\n")

    code, out = _run(capsys, str(token), "--keys", str(keys), "--proof", str(proof))
    assert code == 0, out
    assert "PASS  inclusion: leaf 1 of the signed checkpoint of size 2" in out
    assert f"record                      {records[1]['record_id']} (agent gpu-receipts, seq 1)" in out
    assert f"tokens in / out             {records[1]['tokens_in']} / {records[1]['tokens_out']}" in out
    assert out.rstrip().endswith("RECEIPT VERIFIED")

    answer = json.loads(proof.read_text())
    answer["line"] = answer["line"].replace('"tokens_in":', '"tokens_in":1', 1)  # the platform lies
    proof.write_text(json.dumps(answer))
    code, out = _run(capsys, receipts[1], "--keys", str(keys), "--proof", str(proof))
    assert code == 1
    assert "FAIL  record: the record's leaf hash is" in out and "RECEIPT NOT VERIFIED" in out

    invoice = contract.invoices.get()
    export = tmp_path / "export.ndjson"
    export.write_bytes(owner.get(f"/v1/ledger/invoices/{invoice.pk}/export").content)
    code, out = _run(capsys, receipts[0], "--keys", str(keys), "--export", str(export))
    assert code == 0, out
    assert "PASS  export: the export verifies (2 records)" in out
    code, out = _run(capsys, receipts[2], "--keys", str(keys), "--export", str(export))
    assert code == 1
    assert f"FAIL  record: the export holds no record {records[2]['record_id']}" in out

    code, out = _run(capsys, receipts[2], "--keys", str(keys))  # the signature alone: authentic
    assert (code, out.splitlines()[-1]) == (0, "RECEIPT SIGNED")
    keys.write_text(json.dumps({**keys_json(agent), "agents": []}))
    code, out = _run(capsys, receipts[2], "--keys", str(keys))
    assert code == 1 and "which is not a pinned agent key" in out
    assert _run(capsys, "garbage", "--keys", str(keys))[0] == 2
