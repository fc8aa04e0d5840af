"""Reads of the ledger: proofs, checkpoints, completeness, the invoice export and the store audit."""

from __future__ import annotations

import base64
import hashlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from django.db.models import Count, Max, Min, QuerySet

from agents.models import Agent
from billing.models import Invoice, InvoiceLine
from billing.terms import Terms
from ingest.models import SequenceGap
from treemeter_records.timeutil import unix_nanos

from .merkle import consistency_path, inclusion_path, leaf_hash, multi_inclusion
from .models import BillingExclusion, Checkpoint, Dispute, LogBatch, LogLeaf
from .store import stored_lines
from .tree import StoredTree

EXPORT_FORMAT = "treemeter-invoice-export/1"


class LedgerLookupError(Exception):
    """What was asked for does not exist (or is not the caller's): HTTP 404 / 409 with a code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def checkpoints() -> QuerySet[Checkpoint]:
    return Checkpoint.objects.all()


def checkpoint_of_size(size: int | None) -> Checkpoint:
    """The checkpoint for a tree size, or the latest one."""
    rows = Checkpoint.objects.order_by("-size", "-id")
    found = rows.filter(size=size).first() if size is not None else rows.first()
    if found is None:
        raise LedgerLookupError(404, "no_checkpoint", "No checkpoint of that size has been published.")
    return found


def checkpoint_json(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        "size": checkpoint.size,
        "root_hash": b64(bytes(checkpoint.root_hash)),
        "note": checkpoint.note,
        "reason": checkpoint.reason,
        "created_at": checkpoint.created_at.isoformat(),
    }


def inclusion_proof(record_id: str, size: int | None, tenant: str | None) -> dict[str, Any]:
    """The RFC 6962 audit path of a record's (first) leaf against a checkpoint."""
    leaves = LogLeaf.objects.filter(record_id=record_id)
    if tenant is not None:
        leaves = leaves.filter(tenant=tenant)
    leaf = leaves.order_by("index").first()
    if leaf is None:
        raise LedgerLookupError(404, "unknown_record", f"No logged record {record_id}.")
    checkpoint = checkpoint_of_size(size)
    if leaf.index >= checkpoint.size:
        raise LedgerLookupError(
            409, "not_yet_checkpointed", f"Record {record_id} was logged after checkpoint {checkpoint.size}."
        )
    path = inclusion_path(leaf.index, checkpoint.size, StoredTree(checkpoint.size).subtree)
    return {
        "record_id": record_id,
        "leaf_index": leaf.index,
        "leaf_hash": b64(bytes(leaf.leaf_hash)),
        "tree_size": checkpoint.size,
        "proof": [b64(h) for h in path],
        "checkpoint": checkpoint.note,
    }


def consistency_proof(old: int, new: int) -> dict[str, Any]:
    first, second = checkpoint_of_size(old), checkpoint_of_size(new)
    if first.size > second.size:
        raise LedgerLookupError(
            400, "sizes_reversed", "The first checkpoint must not be larger than the second."
        )
    path = consistency_path(first.size, second.size, StoredTree(second.size).subtree)
    return {
        "from_size": first.size,
        "to_size": second.size,
        "proof": [b64(h) for h in path],
        "from_checkpoint": first.note,
        "to_checkpoint": second.note,
    }


def invoice_for(invoice_id: int, tenant: str | None) -> Invoice:
    rows = Invoice.objects.select_related("contract", "tenant").prefetch_related("lines")
    if tenant is not None:
        rows = rows.filter(tenant__code=tenant)
    invoice = rows.filter(pk=invoice_id).first()
    if invoice is None:
        raise LedgerLookupError(404, "unknown_invoice", f"No invoice {invoice_id}.")
    return invoice


@dataclass
class _Entries:
    lines: list[bytes]
    runs: list[list[int | None]]
    missing: list[str]

    def add(self, line: bytes, index: int | None, slot: int | None, position: int | None) -> None:
        """Append a line; consecutive log indices in consecutive lines of one batch share a run."""
        self.lines.append(line)
        if self.runs:
            count, first, run_slot, run_position = self.runs[-1]
            assert count is not None
            if (index is None and first is None) or (
                index is not None
                and first is not None
                and run_position is not None
                and position is not None
                and index == first + count
                and slot == run_slot
                and position == run_position + count
            ):
                self.runs[-1][0] = count + 1
                return
        self.runs.append([1, index, slot, position])


def invoice_export(invoice: Invoice, previous_sizes: list[int]) -> tuple[dict[str, Any], list[bytes]]:
    """Everything an offline verifier needs for one invoice: a manifest and the record lines.

    Layout (docs/ledger.md): the manifest, then one record per line, exactly the canonical bytes the
    log hashed; ``runs`` say where each line sits in the log and in its signed batch.
    """
    start_ns, end_ns = period_ns(invoice)
    tenant, contract = invoice.tenant.code, invoice.contract.code
    leaves = list(
        LogLeaf.objects.filter(tenant=tenant, contract=contract, start_ns__gte=start_ns, start_ns__lt=end_ns)
        .order_by("index")
        .values_list("index", "record_id", "batch_id", "position", "agent_id", "seq")
    )
    checkpoint = checkpoint_of_size(None)
    if leaves and leaves[-1][0] >= checkpoint.size:
        raise LedgerLookupError(
            409, "not_yet_checkpointed", f"The invoice's records reach past checkpoint {checkpoint.size}."
        )
    lines = stored_lines(tenant, contract, start_ns, end_ns)
    batches, batch_slot, gaps = _agent_batches(leaves)
    entries = _Entries([], [], [])
    logged_ids: set[str] = set()
    for index, record_id, batch_id, position, _, _ in leaves:
        key = str(record_id)
        if key in logged_ids:
            continue  # a record id logged twice (re-sent under another seq): the first leaf counts
        logged_ids.add(key)
        line = lines.get(key)
        if line is None:  # logged but gone from the store
            entries.missing.append(key)
            continue
        entries.add(line, index, batch_slot[batch_id], position)
    for key, line in lines.items():
        if key not in logged_ids:  # stored but never logged: the verifier must see and refuse it
            entries.add(line, None, None, None)
    tree = StoredTree(checkpoint.size)
    indices = [i + k for count, i, _, _ in entries.runs if i is not None and count for k in range(count)]
    if indices:
        tree.prefetch_leaves(indices[0], indices[-1] + 1)
    manifest = {
        "format": EXPORT_FORMAT,
        "invoice": {
            "id": invoice.pk,
            "tenant": tenant,
            "contract": contract,
            "currency": invoice.currency,
            "period_start_ns": start_ns,
            "period_end_ns": end_ns,
            "record_count": invoice.record_count,
            "total": str(invoice.total),
            "lines": [_export_line(line) for line in invoice.lines.all()],
        },
        "prices": _export_prices(invoice),
        "checkpoint": checkpoint.note,
        "consistency": [_consistency_entry(size, checkpoint.size, tree) for size in previous_sizes],
        "lines": len(entries.lines),
        "missing_records": entries.missing,
        "runs": entries.runs,
        "batches": batches,
        "bundle": {
            "tree_size": checkpoint.size,
            "hashes": [b64(h) for h in multi_inclusion(indices, checkpoint.size, tree.subtree)],
        },
        "reported_gaps": gaps,
    }
    return manifest, entries.lines


_SEGMENT_DETAILS = ("effective_from", "segment_start", "segment_end")


def _export_line(line: InvoiceLine) -> dict[str, Any]:
    """A line as exported; one version's line of a dimension whose price changed within the period
    also names the version (`effective_from`) and the part of the period it covers."""
    exported = {
        "kind": line.kind,
        "dimension": line.dimension,
        "quantity": str(line.quantity),
        "unit_price": str(line.unit_price),
        "amount": str(line.amount),
    }
    if "segment_start" in line.details:
        exported.update({key: line.details[key] for key in _SEGMENT_DETAILS})
    return exported


def _export_prices(invoice: Invoice) -> dict[str, Any]:
    """Per dimension, the terms the invoice was rated with (frozen in it): the newest version in the
    period (its quota and period bounds apply to the whole period) and, under `versions`, every
    version that applied, oldest first, each with its `effective_from` ("": the contract start)."""
    prices = {}
    for dimension, versions in Terms.from_json(invoice.terms).versions().items():
        listed = [
            {
                "charge_model": charge.charge_model,
                "properties": charge.properties,
                "included_quantity": charge.included_quantity,
                "effective_from": charge.effective_from,
            }
            for charge in versions
        ]
        prices[dimension] = {**listed[-1], "versions": listed}
    return prices


def export_body(manifest: dict[str, Any], lines: list[bytes]) -> bytes:
    """The export as one NDJSON body: the manifest line, then the record lines."""
    return b"\n".join([orjson.dumps(manifest), *lines]) + b"\n"


def period_ns(invoice: Invoice) -> tuple[int, int]:
    return unix_nanos(invoice.period_start), unix_nanos(invoice.period_end)


def _consistency_entry(old: int, new: int, tree: StoredTree) -> dict[str, Any]:
    if not 0 <= old <= new:
        raise LedgerLookupError(400, "bad_previous_size", f"No consistency proof from size {old} to {new}.")
    return {"from_size": old, "proof": [b64(h) for h in consistency_path(old, new, tree.subtree)]}


def _agent_batches(
    leaves: list[tuple[Any, ...]],
) -> tuple[list[dict[str, Any]], dict[int, int], dict[str, list[list[int]]]]:
    """Every signed batch of the serving agents between their first and last invoice record.

    Returned in agent then seq order, with each batch's slot in that list and the platform's open
    gaps per agent in the same span.
    """
    spans: dict[int, list[int]] = defaultdict(list)
    for _, _, _, _, agent_pk, seq in leaves:
        span = spans[agent_pk]
        spans[agent_pk] = [min(span[0], seq), max(span[1], seq)] if span else [seq, seq]
    out: list[dict[str, Any]] = []
    slot: dict[int, int] = {}
    gaps: dict[str, list[list[int]]] = {}
    agents = dict(Agent.objects.filter(pk__in=spans).values_list("pk", "agent_id"))
    for agent_pk, (low, high) in sorted(spans.items(), key=lambda item: agents[item[0]]):
        rows = LogBatch.objects.filter(agent_id=agent_pk, first_seq__lte=high, last_seq__gte=low).order_by(
            "first_seq", "id"
        )
        for row in rows:
            slot[row.pk] = len(out)
            out.append(
                {
                    "header": bytes(row.header).decode(),
                    "signature": b64(bytes(row.signature)),
                    "leaf_hashes": b64(bytes(row.leaf_hashes)),
                    "seqs": row.seqs,
                }
            )
        gaps[agents[agent_pk]] = [
            [g.first_missing, g.last_missing]
            for g in SequenceGap.objects.filter(
                agent_id=agent_pk, closed_at=None, first_missing__lte=high, last_missing__gte=low
            )
        ]
    return out, slot, gaps


def completeness_report(agent_id: str, start: Any, end: Any) -> dict[str, Any]:
    """Seq ranges received and gaps for the batches an agent sent in [start, end)."""
    agent = Agent.objects.filter(agent_id=agent_id).first()
    if agent is None:
        raise LedgerLookupError(404, "unknown_agent", f"No agent {agent_id}.")
    batches = list(
        agent.batches.filter(received_at__gte=start, received_at__lt=end).values_list("first_seq", "last_seq")
    )
    if not batches:
        return {"agent_id": agent_id, "batches": 0, "ranges": [], "gaps": [], "complete": True}
    low, high = min(first for first, _ in batches), max(last for _, last in batches)
    ranges = [
        [max(r.first_seq, low), min(r.last_seq, high)]
        for r in agent.sequence_ranges.filter(first_seq__lte=high, last_seq__gte=low)
    ]
    gaps = [
        [max(g.first_missing, low), min(g.last_missing, high)]
        for g in agent.sequence_gaps.filter(closed_at=None, first_missing__lte=high, last_missing__gte=low)
    ]
    return {
        "agent_id": agent_id,
        "batches": len(batches),
        "first_seq": low,
        "last_seq": high,
        "ranges": ranges,
        "gaps": gaps,
        "missing": sum(b - a + 1 for a, b in gaps),
        "complete": not gaps,
    }


def audit_store(tenant: str, contract: str, start_ns: int, end_ns: int) -> dict[str, list[str]]:
    """Compare the stored records with the log: changed, missing (deleted) and unlogged (inserted) ids."""
    lines = stored_lines(tenant, contract, start_ns, end_ns)
    logged = {
        str(record_id): bytes(h)
        for record_id, h in LogLeaf.objects.filter(
            tenant=tenant, contract=contract, start_ns__gte=start_ns, start_ns__lt=end_ns
        ).values_list("record_id", "leaf_hash")
    }
    return {
        "changed": sorted(k for k, line in lines.items() if k in logged and leaf_hash(line) != logged[k]),
        "missing": sorted(k for k in logged if k not in lines),
        "unlogged": sorted(k for k in lines if k not in logged),
    }


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
    batches = LogBatch.objects.filter(pk__in=batch_ids).select_related("agent", "batch").order_by("pk")
    _, _, gaps = _agent_batches([(i, None, b, None, a, s) for i, _, b, a, s in leaves])
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
                "header_digest": b.batch.header_digest,
                "body_sha256": b.body_sha256,
                "first_seq": b.first_seq,
                "last_seq": b.last_seq,
            }
            for b in batches
        ],
        "open_gaps": gaps,
        "export": f"/v1/ledger/invoices/{invoice.pk}/export",
    }


def disputes(tenant: str | None) -> QuerySet[Dispute]:
    rows = Dispute.objects.select_related("tenant").prefetch_related("events__actor")
    return rows if tenant is None else rows.filter(tenant__code=tenant)


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


def invoice_completeness(invoice: Invoice) -> dict[str, Any]:
    """What an invoice covers, for its period and contract: the logged records (and how many of them a
    dispute excluded from billing), and per serving agent its seq span and the open gaps inside it."""
    return invoices_completeness([invoice])[0]


def invoices_completeness(invoices: Sequence[Invoice]) -> list[dict[str, Any]]:
    """`invoice_completeness` for many invoices at once (an invoice run's batch), in their order: the
    same reports from three set-based queries per period instead of three or more per invoice. The
    invoices need not be saved yet (their `invoice` key is then None)."""
    by_period: dict[tuple[int, int], list[tuple[int, Invoice]]] = defaultdict(list)
    for position, invoice in enumerate(invoices):
        by_period[period_ns(invoice)].append((position, invoice))
    reports: list[dict[str, Any]] = [{} for _ in invoices]
    for (start_ns, end_ns), group in by_period.items():
        owners = {
            "tenant__in": {i.tenant.code for _, i in group},
            "contract__in": {i.contract.code for _, i in group},
        }
        window = {"start_ns__gte": start_ns, "start_ns__lt": end_ns}
        per_agent = (
            LogLeaf.objects.filter(**owners, **window)
            .values("tenant", "contract", "agent__agent_id", "agent_id")
            .annotate(records=Count("index"), first_seq=Min("seq"), last_seq=Max("seq"))
            .order_by("tenant", "contract", "agent__agent_id")
        )
        agent_rows: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for found in per_agent:
            agent_rows[found["tenant"], found["contract"]].append(dict(found))
        open_gaps: dict[int, list[SequenceGap]] = defaultdict(list)
        agent_ids = {row["agent_id"] for rows in agent_rows.values() for row in rows}
        for gap in SequenceGap.objects.filter(agent_id__in=agent_ids, closed_at=None).order_by(
            "agent_id", "first_missing"
        ):
            open_gaps[gap.agent_id].append(gap)
        excluded = {
            (row["tenant"], row["contract"]): row["count"]
            for row in BillingExclusion.objects.filter(**owners, **window)
            .values("tenant", "contract")
            .annotate(count=Count("pk"))
            .order_by()
        }
        for position, invoice in group:
            owner = (invoice.tenant.code, invoice.contract.code)
            agents = []
            for row in agent_rows.get(owner, []):
                gaps = [
                    [max(g.first_missing, row["first_seq"]), min(g.last_missing, row["last_seq"])]
                    for g in open_gaps.get(row["agent_id"], [])
                    if g.first_missing <= row["last_seq"] and g.last_missing >= row["first_seq"]
                ]
                agents.append(
                    {
                        "agent_id": row["agent__agent_id"],
                        "records": row["records"],
                        "first_seq": row["first_seq"],
                        "last_seq": row["last_seq"],
                        "gaps": gaps,
                        "missing": sum(b - a + 1 for a, b in gaps),
                    }
                )
            reports[position] = {
                "invoice": invoice.pk,
                "contract": invoice.contract.code,
                "period_start": invoice.period_start.isoformat(),
                "period_end": invoice.period_end.isoformat(),
                "invoice_record_count": invoice.record_count,
                "logged_records": sum(a["records"] for a in agents),
                "excluded_records": excluded.get(owner, 0),
                "agents": agents,
                "complete": not any(a["gaps"] for a in agents),
            }
    return reports
