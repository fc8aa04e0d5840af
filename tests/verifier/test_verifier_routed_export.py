"""Routed (v2) records end to end: ingested through the API, invoiced, exported to the customer, and
checked offline by the standalone verifier against the pinned executor and router keys."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from django.test import Client

from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from tests.factories import signing_agent
from tests.ingest.test_ingest_routed import routed
from tests.ledger.support import member_client, november_invoice, pinned_keys, priced_contract, send
from treemeter_records import canonical_bytes
from treemeter_verify import verify_export
from treemeter_verify.check import read_export

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


def test_an_exported_routed_record_verifies_offline_and_a_changed_one_does_not(client: Client) -> None:
    contract = priced_contract()
    executor = signing_agent(contract, agent_id="exec-a")
    router = signing_agent(contract, agent_id="l1-a", kind="router")
    records = [routed(executor, router, contract) for _ in range(3)] + [executor.record(contract)]
    assert send(client, executor, records)["accepted"] == 4
    invoice = november_invoice(contract)
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    response = member_client(contract, "alice").get(f"/v1/ledger/invoices/{invoice.pk}/export")
    assert response.status_code == 200, response.content
    manifest, lines = read_export(response.content)
    verdicts = {v.check: v for v in verify_export(manifest, lines, pinned_keys(executor, router)).verdicts}
    assert all(v.ok for v in verdicts.values()), [v for v in verdicts.values() if not v.ok]
    assert not verdicts["routing decisions"].skipped
    assert sum(orjson.loads(line)["v"] == 2 for line in lines) == 3

    without_router = verify_export(manifest, lines, pinned_keys(executor))
    assert not {v.check: v for v in without_router.verdicts}["routing decisions"].ok

    changed: list[Any] = [orjson.loads(line) for line in lines]
    first = next(r for r in changed if r["v"] == 2)
    first["decision"]["claims"]["subtree"] = "medical"
    forged = [canonical_bytes(r) for r in changed]
    failed = {
        v.check for v in verify_export(manifest, forged, pinned_keys(executor, router)).verdicts if not v.ok
    }
    assert "routing decisions" in failed
