"""The invoice export (`treemeter-invoice-export/1`, docs/ledger.md): everything an offline verifier
needs for one invoice, from the log (leaves, signed batches, proofs), the store and the invoice."""

from __future__ import annotations

import gzip
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from django.db.models import TextField
from django.db.models.functions import Cast

from accounts.access import Principal, scoped
from agents.models import Agent
from clickhouse_store.queries.records import stored_lines
from ingest.models import SequenceGap
from ledger.merkle import multi_inclusion
from ledger.models import Checkpoint, LogBatch, LogLeaf
from ledger.selectors import (
    LedgerLookupError,
    b64,
    checkpoint_of_size,
    consistency_entry,
    covering_checkpoint,
)
from ledger.tree import StoredTree
from pricing.dimensions import Dimension
from treemeter_records.timeutil import unix_nanos

from .models import Invoice, InvoiceLine, Outcome
from .terms import Terms

EXPORT_FORMAT = "treemeter-invoice-export/1"


def invoice_for(invoice_id: int, principal: Principal) -> Invoice:
    """The invoice if the principal sees it, else 404 unknown_invoice."""
    rows = Invoice.objects.select_related("contract", "tenant").prefetch_related("lines")
    invoice = scoped(rows, principal).filter(pk=invoice_id).first()
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
        .annotate(record_text=Cast("record_id", TextField()))  # as text by the database: 1M UUIDs, 1 s less
        .values_list("index", "record_text", "batch_id", "position", "agent_id", "seq")
    )
    checkpoint = checkpoint_of_size(None)
    if leaves and leaves[-1][0] >= checkpoint.size:
        raise LedgerLookupError(
            409, "not_yet_checkpointed", f"The invoice's records reach past checkpoint {checkpoint.size}."
        )
    lines = stored_lines(tenant, contract, start_ns, end_ns)
    batches, batch_slot, gaps = agent_batches(leaves)
    entries = _Entries([], [], [])
    logged_ids: set[str] = set()
    for index, key, batch_id, position, _, _ in leaves:
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
            "subtotal": str(invoice.subtotal),
            "tax": str(invoice.tax),
            "total": str(invoice.total),
            **_export_credits(invoice),
            "tax_terms": _export_tax_terms(invoice),
            "terms": _export_commercial_terms(invoice),
            "catalogue": _export_catalogue(invoice),
            "metrics": _export_metrics(invoice),
            **_export_events(invoice),
            **_export_gray_release(invoice),
            "lines": _export_lines(invoice),
        },
        "prices": _export_prices(invoice),
        "earlier_terms": _export_earlier_terms(invoice),
        "checkpoint": checkpoint.note,
        "consistency": [consistency_entry(size, checkpoint.size, tree) for size in previous_sizes],
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
# What an SLA service-credit line states of its credit (`sla.billing_sources.invoice_credit`).
_SERVICE_CREDIT_DETAILS = (
    "sla_report",
    "month",
    "period_start",
    "period_end",
    "objective",
    "measured_percent",
    "target_percent",
    "ladder_step",
    "credit_percent",
    "fee_basis",
)


# What a late-usage adjustment line states of the earlier invoice it adjusts (`billing.lateness`): its
# number and period, what it re-rates (`rerated`) or, priced by the catalogue, what was billed before.
_LATE_USAGE_DETAILS = ("invoice", "period_start", "rerated", "billed_before")


def _export_lines(invoice: Invoice) -> list[dict[str, Any]]:
    """The invoice's lines as exported; an outcome line with the outcomes it billed (one read)."""
    lines = list(invoice.lines.all())
    refs = [
        ref
        for line in lines
        if line.kind == InvoiceLine.Kind.USAGE and line.dimension == Dimension.OUTCOMES
        for ref in line.details.get("outcomes", [])
    ]
    outcomes = {o.ref: o for o in Outcome.objects.filter(contract_id=invoice.contract_id, ref__in=refs)}
    return [_export_line(line, outcomes) for line in lines]


def _export_outcome(ref: str, outcome: Outcome | None) -> dict[str, Any]:
    """One billed outcome: its ref, type and value, and the record that declared it (None: the API)."""
    if outcome is None:
        return {"ref": ref, "type": None, "value": None, "record_id": None}
    return {
        "ref": ref,
        "type": outcome.kind,
        "value": str(outcome.value),
        "record_id": None if outcome.record_id is None else str(outcome.record_id),
    }


def _export_line(line: InvoiceLine, outcomes: dict[str, Outcome]) -> dict[str, Any]:
    """A line as exported; one version's line of a dimension whose price changed within the period
    also names the version (`effective_from`) and the part of the period it covers; an SLA service
    credit states its credit (`service_credit`), an outcome line its billed outcomes (`outcomes`), a
    business-event line its events with their records (`events`)."""
    exported: dict[str, Any] = {
        "kind": line.kind,
        "dimension": line.dimension,
        "quantity": str(line.quantity),
        "unit_price": str(line.unit_price),
        "amount": str(line.amount),
    }
    if "segment_start" in line.details:
        exported.update({key: line.details[key] for key in _SEGMENT_DETAILS})
    if "taxes" in line.details:
        exported["taxes"] = line.details["taxes"]
    if "coupon" in line.details:
        exported["coupon"] = line.details["coupon"]
    if "catalogue" in line.details:
        exported["catalogue"] = line.details["catalogue"]
    if "events" in line.details:
        exported["events"] = line.details["events"]
    if line.kind == InvoiceLine.Kind.ADJUSTMENT and "invoice" in line.details:
        exported["late_usage"] = {
            key: line.details[key] for key in _LATE_USAGE_DETAILS if key in line.details
        }
    if line.kind == InvoiceLine.Kind.SERVICE_CREDIT and "fee_basis" in line.details:
        exported["service_credit"] = {key: line.details.get(key) for key in _SERVICE_CREDIT_DETAILS}
    if (
        line.kind == InvoiceLine.Kind.USAGE
        and line.dimension == Dimension.OUTCOMES
        and "outcomes" in line.details
    ):
        exported["outcomes"] = [_export_outcome(ref, outcomes.get(ref)) for ref in line.details["outcomes"]]
    return exported


def _export_credits(invoice: Invoice) -> dict[str, Any]:
    """Prepaid credits: what finalisation spent (`credits_applied`) and on which line kinds
    (`credit_allocation`, pinned in the terms; null before finalisation), the credit notes issued since
    and what is owed (`amount_due`)."""
    return {
        "credits_applied": str(invoice.credits_applied),
        "credit_allocation": invoice.terms.get("credit_allocation"),
        "credit_notes": str(invoice.credit_notes),
        "amount_due": str(invoice.amount_due),
    }


def _export_commercial_terms(invoice: Invoice) -> dict[str, Any]:
    """The terms of the lines not derived from records (frozen in the invoice): the base fee and its
    timing, the minimum commitment, the contract's dates (for proration), the line kinds prepaid credits
    may pay (`credit_order`, empty: every line) and the coupons."""
    terms = Terms.from_json(invoice.terms)
    return {
        "base_fee": terms.base_fee,
        "base_fee_timing": terms.base_fee_timing,
        "minimum_commitment": terms.minimum_commitment,
        "starts_at": terms.starts_at,
        "ends_at": terms.ends_at,
        "credit_order": list(terms.credit_order),
        "coupons": [
            {"code": c.code, "percent_off": c.percent_off, "amount_off": c.amount_off} for c in terms.coupons
        ],
    }


def _export_catalogue(invoice: Invoice) -> dict[str, Any] | None:
    """For a contract priced by the LLM price catalogue: the adjustment and the catalogue versions the
    records used (frozen in the invoice); None for the others."""
    catalogue = Terms.from_json(invoice.terms).catalogue
    return catalogue.as_json() if catalogue is not None else None


def _export_metrics(invoice: Invoice) -> dict[str, str]:
    """The contract's custom metrics the invoice was rated with (frozen in it): code → expression, its
    aggregation included, so that a verifier re-measures each metric's lines from the records."""
    return dict(Terms.from_json(invoice.terms).metrics)


def _export_events(invoice: Invoice) -> dict[str, Any]:
    """How the invoice's business-event units were measured (frozen in it), under `events`: unit →
    package, required capabilities' model ids, acceptance rules by model id; nothing without any."""
    events = Terms.from_json(invoice.terms).events
    return {"events": {unit: e.as_json() for unit, e in events.items()}} if events else {}


def _export_gray_release(invoice: Invoice) -> dict[str, Any]:
    """The gray-release stages with billing off whose records rating left out (frozen in the invoice's
    exclusions), under `gray_release`: package and [starts_ns, ends_ns); nothing without any."""
    windows = invoice.terms.get("exclusions", {}).get("gray_release", [])
    return (
        {
            "gray_release": [
                {
                    "plan": w["plan"],
                    "stage": w["stage"],
                    "package": w["package"],
                    "starts_ns": unix_nanos(datetime.fromisoformat(w["starts_at"])),
                    "ends_ns": unix_nanos(datetime.fromisoformat(w["ends_at"])),
                }
                for w in windows
            ]
        }
        if windows
        else {}
    )


def _export_tax_terms(invoice: Invoice) -> dict[str, Any]:
    """The tax terms the invoice was taxed with (frozen in it): the contract's taxes per line, or else
    its single rate on the subtotal; and whether the prices include them."""
    terms = Terms.from_json(invoice.terms)
    return {
        "rate": terms.tax_rate,
        "inclusive": terms.tax_inclusive,
        "taxes": [tax.as_json() for tax in terms.taxes],
    }


def _export_earlier_terms(invoice: Invoice) -> dict[str, Any]:
    """The pinned terms of each earlier invoice that an adjustment line of this one adjusts, by number:
    its prices and catalogue versions, which price its late usage."""
    numbers = set(
        invoice.lines.filter(kind=InvoiceLine.Kind.ADJUSTMENT).values_list("details__invoice", flat=True)
    )
    earlier = Invoice.objects.filter(contract_id=invoice.contract_id, number__in=numbers - {None})
    return {
        str(other.number): {"prices": _export_prices(other), "catalogue": _export_catalogue(other)}
        for other in earlier.order_by("period_start")
    }


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


# Fast over size: level 1 already takes a million-record export to about a tenth (JSON lines repeat
# their keys), where level 6 costs several times the time for a few percent more.
GZIP_LEVEL = 1


def compressed(body: bytes) -> bytes:
    """The export gzip-compressed: gzip rather than zstd because the verifier reads it with the standard
    library only (Python 3.11 has no zstd), in memory, without unpacking it to disk."""
    return gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0)


def export_body(manifest: dict[str, Any], lines: list[bytes]) -> bytes:
    """The export as one NDJSON body: the manifest line, then the record lines."""
    return b"\n".join([orjson.dumps(manifest), *lines]) + b"\n"


def period_ns(invoice: Invoice) -> tuple[int, int]:
    return unix_nanos(invoice.period_start), unix_nanos(invoice.period_end)


def invoice_checkpoint(invoice: Invoice) -> Checkpoint | None:
    """The signed checkpoint that covers every logged record the invoice bills: the one a customer checks
    its records against (the checkpoint pinned at finalisation may predate the last of them)."""
    return covering_checkpoint(invoice.tenant.code, invoice.contract.code, *period_ns(invoice))


def agent_batches(
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
