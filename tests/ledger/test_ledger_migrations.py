"""The moves of issue 14 keep the data: a database at the schema before them, with rows in it, migrated
forward, reads the rows back through the new models; migrated back, it holds them as before.

- Dispute, DisputeEvent and BillingExclusion moved from the ledger app to billing with their tables
  (billing/0008_disputes_from_ledger, ledger/0005_move_disputes_to_billing: state only);
- the link between a signed batch and ingest's answer turned round: `LogBatch.batch` became
  `IngestBatch.log_batch` (ledger/0006, ingest/0003-0005 copying the links, ledger/0007).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from billing.models import BillingExclusion, Dispute, DisputeEvent, InvoiceLine
from ingest.models import IngestBatch
from ledger.models import LogBatch
from tests.factories import UserFactory, signing_agent
from tests.ledger.support import november_invoice, priced_contract

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("clickhouse")]

# The last migrations before the moves (migrating back to them unapplies the moves, billing's included).
BEFORE = [("ledger", "0004_unique_leaves"), ("ingest", "0002_outbox")]


def _migrate(targets: list[tuple[str, str]] | None = None) -> Any:
    """Migrate to ``targets`` (default: every app's latest); the historical apps there."""
    executor = MigrationExecutor(connection)
    nodes = targets or executor.loader.graph.leaf_nodes()
    executor.migrate(nodes)
    return MigrationExecutor(connection).loader.project_state(nodes).apps


def _old_rows(old: Any, agent_pk: int, invoice: Any, line: InvoiceLine, actor_pk: int) -> dict[str, Any]:
    """Two answered batches with their signed batches, and a dispute with its history and an exclusion,
    written through the historical models of the old schema."""
    answers, signed = old.get_model("ingest", "IngestBatch"), old.get_model("ledger", "LogBatch")
    pairs = []
    for n in range(2):
        answer = answers.objects.create(
            agent_id=agent_pk,
            header_digest=f"{n:064x}",
            key_id="key-1",
            first_seq=10 * n + 1,
            last_seq=10 * n + 2,
            record_count=2,
            merkle_root="ab" * 32,
            accepted=2,
            duplicate=0,
            rejected=0,
            status_code=200,
            response={"accepted": 2, "n": n},
        )
        batch = signed.objects.create(
            batch_id=answer.pk,
            agent_id=agent_pk,
            header=f"header {n}".encode(),
            signature=b"s" * 64,
            body_sha256="cd" * 32,
            leaf_hashes=bytes([n]) * 64,
            first_seq=10 * n + 1,
            last_seq=10 * n + 2,
        )
        pairs.append((answer.pk, batch.pk))
    dispute = old.get_model("ledger", "Dispute").objects.create(
        invoice_id=invoice.pk,
        line_id=line.pk,
        tenant_id=invoice.tenant_id,
        reason="the agent was down",
        status="excluded",
        evidence={"records": 2, "checkpoint": {"size": 7}},
        credited=Decimal("1.25"),
    )
    events = old.get_model("ledger", "DisputeEvent")
    events.objects.create(dispute_id=dispute.pk, actor_id=actor_pk, action="opened", detail={"reason": "r"})
    events.objects.create(dispute_id=dispute.pk, action="records_excluded", detail={"excluded": 1})
    record_id = uuid.uuid4()
    old.get_model("ledger", "BillingExclusion").objects.create(
        dispute_id=dispute.pk,
        record_id=record_id,
        tenant=invoice.tenant.code,
        contract=invoice.contract.code,
        start_ns=123,
    )
    return {"pairs": pairs, "dispute": dispute.pk, "record_id": record_id}


@pytest.fixture
def latest_schema_after() -> Iterator[None]:
    """Whatever happens in the test, the database is left at the latest schema for the next ones."""
    yield
    _migrate()


@pytest.mark.usefixtures("latest_schema_after")
def test_rows_written_at_the_old_schema_read_back_through_the_new_models() -> None:
    contract = priced_contract()
    agent = signing_agent(contract)
    invoice = november_invoice(contract)
    line = InvoiceLine.objects.filter(invoice=invoice).order_by("pk").first()
    assert line is not None
    actor: Any = UserFactory()

    old = _migrate(BEFORE)
    rows = _old_rows(old, agent.key_row.agent_id, invoice, line, actor.pk)
    _migrate()

    for answer_pk, batch_pk in rows["pairs"]:  # each answer references its own signed batch
        assert IngestBatch.objects.get(pk=answer_pk).log_batch_id == batch_pk
        assert LogBatch.objects.get(pk=batch_pk).ingest_batch.pk == answer_pk
    first = LogBatch.objects.get(ingest_batch__header_digest=f"{0:064x}")
    assert (bytes(first.header), first.first_seq) == (b"header 0", 1)

    dispute = Dispute.objects.get(pk=rows["dispute"])
    assert (dispute.invoice_id, dispute.line_id, dispute.tenant_id) == (
        invoice.pk,
        line.pk,
        invoice.tenant_id,
    )
    assert (dispute.status, dispute.credited, dispute.reason) == (
        Dispute.Status.EXCLUDED,
        Decimal("1.25"),
        "the agent was down",
    )
    assert dispute.evidence == {"records": 2, "checkpoint": {"size": 7}}
    assert [(e.action, e.actor_id) for e in dispute.events.all()] == [
        ("opened", actor.pk),
        ("records_excluded", None),
    ]
    assert DisputeEvent.objects.filter(dispute=dispute).count() == 2
    [exclusion] = BillingExclusion.objects.all()
    assert (exclusion.dispute_id, exclusion.record_id, exclusion.start_ns) == (
        dispute.pk,
        rows["record_id"],
        123,
    )
    assert [t._meta.db_table for t in (Dispute, DisputeEvent, BillingExclusion)] == [
        "ledger_dispute",
        "ledger_disputeevent",
        "ledger_billingexclusion",
    ]

    # New rows take the next ids of the same tables (their sequences moved with them).
    later = Dispute.objects.create(
        invoice=invoice, line=line, tenant=invoice.tenant, reason="again", evidence={}, status="rejected"
    )
    assert later.pk > dispute.pk

    # And back: the old schema holds the links and the rows as they were.
    old = _migrate(BEFORE)
    signed = old.get_model("ledger", "LogBatch")
    for answer_pk, batch_pk in rows["pairs"]:
        assert signed.objects.get(pk=batch_pk).batch_id == answer_pk
    assert old.get_model("ledger", "Dispute").objects.filter(pk=rows["dispute"]).exists()
    assert old.get_model("ledger", "BillingExclusion").objects.get().record_id == rows["record_id"]
