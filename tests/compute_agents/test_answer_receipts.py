"""Every answer that left a record carries its receipt (issue 21.5): the Treemeter-Receipt header and
``treemeter.receipt`` (a stream's last finish chunk), signed by the agent over the record's leaf hash,
exactly the hash of the line the agent spools and ships."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from compute_agents.app import create_app
from entitlements.services import issue_api_key
from tests.compute_agents.agent_harness import start_agent
from tests.factories import ContractFactory
from treemeter_records import private_key_from_seed
from treemeter_records.receipts import RECEIPT_HEADER, read_receipt, verify_receipt

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db(transaction=True)]


def test_answers_carry_the_receipt_of_the_line_they_spooled(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    key = issue_api_key(contract_code=contract.code).secret
    harness = start_agent(live_server.url, tiny_model, tmp_path, [contract], agent_id="gpu-receipts")
    agent_key = private_key_from_seed(harness.seed).public_key()
    client = TestClient(create_app(harness.agent.service))
    headers = {"Authorization": f"Bearer {key}"}

    whole = client.post(
        "/v1/completions", json={"model": "tiny", "prompt": "contract", "max_tokens": 3}, headers=headers
    )
    assert whole.status_code == 200
    token = whole.headers[RECEIPT_HEADER]
    assert whole.json()["treemeter"]["receipt"] == token
    streamed = client.post(
        "/v1/chat/completions",
        json={
            "model": "tiny",
            "messages": [{"role": "user", "content": "clause"}],
            "max_tokens": 3,
            "stream": True,
        },
        headers=headers,
    )
    events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    [finish] = [e for e in events if "treemeter" in e]
    refused = client.post("/v1/completions", json={"model": "gpt-4o", "prompt": "x"}, headers=headers)
    assert refused.status_code == 404
    receipts = [token, finish["treemeter"]["receipt"], refused.headers[RECEIPT_HEADER]]

    lines = {seq: body for seq, _, body in harness.agent.service.spool.pending(10)}
    assert len(lines) == 3
    for seq, receipt in enumerate(read_receipt(t) for t in receipts):
        assert verify_receipt(receipt, agent_key)
        record = json.loads(lines[seq])
        assert receipt.claims == {
            "v": 1,
            "record_id": record["record_id"],
            "agent_id": "gpu-receipts",
            "seq": seq,
            "leaf_hash": hashlib.sha256(b"\x00" + lines[seq]).hexdigest(),
            "tenant": contract.tenant.code,
            "contract": contract.code,
            "start_ns": record["start_ns"],
        }
    assert [json.loads(lines[s])["status"] for s in range(3)] == ["ok", "ok", "rejected"]
    assert whole.headers["x-request-id"] == read_receipt(token).record_id
