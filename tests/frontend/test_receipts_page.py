"""The portal's receipt page (issue 21.5): a receipt pasted or uploaded shows its claims, its record and
inclusion proof; a missing record's receipt offers the dispute to billing members, and opens it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from accounts.models import Role
from billing.models import Dispute
from frontend.labels import RECEIPT_STATUSES
from ledger.models import Checkpoint
from ledger.receipts import RECEIPT_STATUSES as CHECK_STATUSES
from ledger.services import publish_checkpoint
from tests.factories import ContractFactory, signing_agent
from tests.frontend.support import member, november_invoice, priced_contract

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
NOV_20_NS = int(datetime(2026, 11, 20, tzinfo=UTC).timestamp()) * 10**9


def test_every_receipt_status_has_a_label() -> None:
    assert set(RECEIPT_STATUSES) == set(CHECK_STATUSES)


def test_a_pasted_or_uploaded_receipt_shows_its_record_proof_and_a_missing_ones_dispute() -> None:
    contract = priced_contract()
    november_invoice(contract, records=2)  # logged by agent-<code>, finalised, checkpointed
    agent = signing_agent(contract, agent_id="gpu-portal")
    logged = agent.record(contract, start_ns=NOV_20_NS)
    response = Client().post(
        "/v1/ingest/batches", data=agent.batch([logged]).body(), content_type="application/x-ndjson"
    )
    assert response.status_code == 200
    publish_checkpoint(Checkpoint.Reason.MANUAL)
    never_shipped = agent.record(contract, start_ns=NOV_20_NS + 10**9)
    url = reverse("portal-receipts")
    billing = member(contract.tenant, Role.BILLING)
    reader = member(contract.tenant, Role.READ_ONLY, language="zh-hans")

    assert 'data-testid="receipt-form"' in billing.get(url).content.decode()
    page = billing.post(url, {"receipt": agent.receipt(logged)}).content.decode()
    assert 'data-testid="receipt-status">In the log, in a signed checkpoint<' in page
    assert reverse("portal-record", kwargs={"record_id": logged["record_id"]}) in page
    assert 'data-testid="receipt-inclusion">Log position 2 · tree size 3<' in page
    assert 'data-testid="receipt-dispute"' not in page

    upload = SimpleUploadedFile("receipt.txt", (agent.receipt(never_shipped) + "\n").encode())
    missing = reader.post(url, {"receipt_file": upload}).content.decode()
    assert 'data-testid="receipt-status">' in missing and 'data-testid="receipt-evidence"' in missing
    assert 'data-testid="receipt-dispute"' not in missing  # a reader may check, not dispute
    missing = billing.post(url, {"receipt": agent.receipt(never_shipped)}).content.decode()
    assert 'data-testid="receipt-status">Missing from the log<' in missing
    assert 'data-testid="receipt-dispute"' in missing

    opened = billing.post(reverse("portal-receipt-dispute"), {"receipt": agent.receipt(never_shipped)})
    dispute = Dispute.objects.get()
    assert (opened.status_code, opened["Location"]) == (
        302,
        reverse("portal-dispute", kwargs={"pk": dispute.pk}),
    )
    assert dispute.evidence["receipt"]["claims"]["record_id"] == never_shipped["record_id"]
    refused = reader.post(reverse("portal-receipt-dispute"), {"receipt": agent.receipt(never_shipped)})
    assert refused.status_code == 403

    bad = billing.post(url, {"receipt": "not a receipt"})
    assert bad.status_code == 400
    assert 'data-testid="receipt-error">a receipt is base64url of a JSON object<' in bad.content.decode()
    stranger = member(ContractFactory.create().tenant, Role.BILLING)
    other = stranger.post(url, {"receipt": agent.receipt(logged)})
    assert other.status_code == 404
    assert 'data-testid="receipt-claims"' not in other.content.decode()
