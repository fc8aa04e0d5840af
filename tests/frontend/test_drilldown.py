"""From an invoice line to its records, from a record to its proof, and the proof checked by the page's
own verify.js (run here by node, as the browser runs it: SHA-256 path, Ed25519 checkpoint signature)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from billing.drilldown import PAGE_SIZE, line_records
from billing.models import Invoice
from billing.services import finalize_invoice, generate_invoice
from common.periods import month_bounds
from contracts.models import ContractPrice
from ledger.models import Checkpoint, LogLeaf
from ledger.selectors import b64, checkpoint_public_key
from ledger.services import publish_checkpoint
from tests.factories import ContractFactory, signing_agent
from tests.frontend.support import member

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
VERIFY_JS = Path(__file__).resolve().parents[2] / "frontend" / "static" / "frontend" / "verify.js"
DIMENSIONS = ("requests", "tokens_in", "tokens_out", "cached_tokens", "expert_tokens", "routing_hops",
              "l2_misses", "l3_seconds", "distinct_experts")  # fmt: skip


@pytest.fixture
def invoice(client: Client) -> Invoice:
    """November: 60 served records with varied usage and one rejected, priced on every dimension."""
    contract = ContractFactory.create()
    for dimension in DIMENSIONS:
        ContractPrice.objects.create(contract=contract, dimension=dimension, unit_price=Decimal("0.01"))
    agent = signing_agent(contract)
    start = int(datetime(2026, 11, 10, tzinfo=UTC).timestamp()) * 10**9
    records = [
        agent.record(
            contract, start_ns=start + i * 10**9, tokens_in=100 + i, tokens_out=i, expert_cache_misses=i % 3
        )
        for i in range(60)
    ]
    records.append(agent.record(contract, start_ns=start + 99 * 10**9, status="rejected"))
    body = agent.batch(records).body()
    assert client.post("/v1/ingest/batches", body, content_type="application/x-ndjson").status_code == 200
    finalised = finalize_invoice(generate_invoice(contract.pk, *month_bounds("2026-11")))
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    return finalised


def test_each_lines_records_add_up_to_the_line(invoice: Invoice) -> None:
    for line in invoice.lines.filter(kind="usage"):
        first, second = line_records(invoice, line, 1), line_records(invoice, line, 2)
        assert (first.total, first.pages, len(first.rows), len(second.rows)) == (61, 2, PAGE_SIZE, 11)
        shares = [share for _, share in first.rows + second.rows]
        assert sum(s.quantity for s in shares if s) == line.quantity, line.dimension
        assert abs(sum(s.amount for s in shares if s and s.amount) - line.amount) < Decimal("0.0001")


def test_the_line_page_lists_its_records_and_each_record_page_shows_its_proof(invoice: Invoice) -> None:
    owner = member(invoice.tenant)
    line = invoice.lines.get(dimension="tokens_in")
    listing = owner.get(reverse("portal-line-records", kwargs={"pk": invoice.pk, "line_pk": line.pk}))
    text = listing.content.decode()
    assert "61 records of the contract in this period" in text
    assert len(re.findall(r'data-testid="line-record-', text)) == PAGE_SIZE
    assert 'data-testid="line-records-next"' in text
    leaf = LogLeaf.objects.filter(tenant=invoice.tenant.code).order_by("index")[0]
    assert f'href="/records/{leaf.record_id}"' in text

    page = owner.get(reverse("portal-record", kwargs={"record_id": leaf.record_id})).content.decode()
    assert f'data-testid="record-leaf-hash">{b64(bytes(leaf.leaf_hash))}<' in page
    assert 'data-testid="record-cache">2 / 0<' in page  # the factory's hits / the first record's misses
    assert "router-1" in page and "gpu-1" in page and "#4 · 88" in page  # hops and experts
    shares = page[page.index('data-testid="record-shares"') :]
    assert re.search(r"Input tokens</td><td class=\"num\">100<", shares)
    assert "/v1/ledger/records/" in page and 'id="verify-record"' in page
    vkey = Client().get("/v1/ledger/checkpoint-key").json()["note_verifier_key"]
    assert f'<code data-testid="checkpoint-verifier-key">{vkey}</code>' in page

    stranger = member(ContractFactory.create().tenant)
    assert stranger.get(reverse("portal-record", kwargs={"record_id": leaf.record_id})).status_code == 404
    records_url = reverse("portal-line-records", kwargs={"pk": invoice.pk, "line_pk": line.pk})
    assert stranger.get(records_url).status_code == 404


def _node_verify(proof: dict, public_key: str) -> list[dict]:
    script = (
        f"const v = require({json.dumps(str(VERIFY_JS))});"
        "const [proof, origin, key] = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "v.verifyInclusion(proof, origin, key).then(s => console.log(JSON.stringify(s)));"
    )
    stdin = json.dumps([proof, settings.LEDGER_ORIGIN, public_key])
    done = subprocess.run(["node", "-e", script], input=stdin, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


@pytest.mark.skipif(
    shutil.which("node") is None, reason="node is not installed (the browser test runs verify.js too)"
)
def test_verify_js_checks_a_real_proof_and_refuses_a_forged_one(invoice: Invoice) -> None:
    leaf = LogLeaf.objects.filter(tenant=invoice.tenant.code).order_by("index")[7]
    proof = member(invoice.tenant).get(f"/v1/ledger/records/{leaf.record_id}/inclusion").json()
    key = checkpoint_public_key().hex()

    steps = _node_verify(proof, key)
    assert [(s["name"], s["ok"]) for s in steps] == [
        ("path", True),
        ("checkpoint", True),
        ("key", True),
        ("signature", True),
    ]

    forged = {**proof, "leaf_hash": b64(bytes(LogLeaf.objects.get(index=leaf.index + 1).leaf_hash))}
    assert [(s["name"], s["ok"]) for s in _node_verify(forged, key)][-1] == ("checkpoint", False)
    other_key = "00" * 32
    assert [(s["name"], s["ok"]) for s in _node_verify(proof, other_key)][-1] == ("key", False)
    note = proof["checkpoint"]
    tampered = {**proof, "checkpoint": note[:-3] + "AA\n"}  # the signature's last characters changed
    assert [(s["name"], s["ok"]) for s in _node_verify(tampered, key)][-1][1] is False
