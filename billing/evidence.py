"""Reads for disputes: the evidence attached to a disputed invoice line, the disputes themselves, and the
stored records a customer-dependency resolution excludes (and what they were billed)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet

from accounts.access import Principal, scoped
from clickhouse_store.queries.billing import named_record_starts, record_aggregates, window_record_starts
from ledger.models import Checkpoint, LogBatch, LogLeaf
from pricing.dimensions import AGGREGATED_DIMENSIONS, quantity_from_aggregate

from .exports import agent_batches, period_ns
from .models import Dispute, Invoice


@dataclass(frozen=True)
class Window:
    """Records that started in [start_ns, end_ns) with this status."""

    start_ns: int
    end_ns: int
    status: str


def dispute_evidence(invoice: Invoice, line: Any) -> dict[str, Any]:
    """What the platform holds for a disputed line: the signed checkpoint, a digest of exactly which
    logged records the invoice covers, the signed batches they came in (and the hash of each raw batch
    as received), and the serving agents' open gaps. The records and proofs themselves are the export.
    """
    start_ns, end_ns = period_ns(invoice)
    leaves = list(
        LogLeaf.objects.filter(
            tenant=invoice.tenant.code,
            contract=invoice.contract.code,
            start_ns__gte=start_ns,
            start_ns__lt=end_ns,
        )
        .order_by("index")
        .values_list("index", "leaf_hash", "batch_id", "agent_id", "seq")
    )
    digest = hashlib.sha256(b"".join(bytes(h) for _, h, _, _, _ in leaves)).hexdigest()
    batch_ids = sorted({batch for _, _, batch, _, _ in leaves})
    batches = LogBatch.objects.filter(pk__in=batch_ids).select_related("agent", "ingest_batch").order_by("pk")
    _, _, gaps = agent_batches([(i, None, b, None, a, s) for i, _, b, a, s in leaves])
    checkpoint = Checkpoint.objects.order_by("-size", "-id").first()
    return {
        "line": {"dimension": line.dimension, "quantity": str(line.quantity), "amount": str(line.amount)},
        "checkpoint": {"size": checkpoint.size, "note": checkpoint.note}
        if checkpoint
        else {"size": 0, "note": ""},
        "records": len(leaves),
        "log_indices": [leaves[0][0], leaves[-1][0]] if leaves else [],
        "leaf_hashes_sha256": digest,
        "batches": [
            {
                "agent_id": b.agent.agent_id,
                "header_digest": b.ingest_batch.header_digest,
                "body_sha256": b.body_sha256,
                "first_seq": b.first_seq,
                "last_seq": b.last_seq,
            }
            for b in batches
        ],
        "open_gaps": gaps,
        "export": f"/v1/ledger/invoices/{invoice.pk}/export",
    }


def disputes(principal: Principal) -> QuerySet[Dispute]:
    """The disputes the principal sees, with their history."""
    return scoped(Dispute.objects.select_related("tenant").prefetch_related("events__actor"), principal)


def dispute_json(dispute: Dispute) -> dict[str, Any]:
    return {
        "id": dispute.pk,
        "invoice": dispute.invoice_id,
        "line": dispute.line_id,
        "tenant": dispute.tenant.code,
        "reason": dispute.reason,
        "status": dispute.status,
        "credited": str(dispute.credited),
        "evidence": dispute.evidence,
        "history": [
            {
                "action": e.action,
                "actor": e.actor.get_username() if e.actor else None,
                "at": e.at.isoformat(),
                "detail": e.detail,
            }
            for e in dispute.events.all()
        ],
    }


def matching_records(
    tenant: str, contract: str, period: tuple[int, int], record_ids: list[str] | None, window: Window | None
) -> dict[str, int]:
    """record_id → start_ns of the contract's stored records in the period that are named in
    ``record_ids`` or, with a ``window``, start in it with its status."""
    if record_ids is not None:
        rows = named_record_starts(tenant, contract, *period, record_ids)
    elif window is not None:
        rows = window_record_starts(tenant, contract, *period, window.start_ns, window.end_ns, window.status)
    else:
        raise ValueError("name the records or a window")
    return dict(rows)


def billed_usage(tenant: str, contract: str, record_ids: list[str]) -> dict[str, Decimal]:
    """What these records add to each built-in dimension, as billing measures it (only `ok` is billed)."""
    if not record_ids:
        return {dimension: Decimal(0) for dimension in AGGREGATED_DIMENSIONS}
    aggregates = record_aggregates(tenant, contract, record_ids)
    return {d: quantity_from_aggregate(d, raw) for d, raw in aggregates.items()}
