"""From an invoice line to the records it bills, and from a record to its share of each line.

A record's quantity of a dimension is what the rating aggregate (`clickhouse_store.queries.billing.
AGGREGATE_SQL`) adds up for it: only served records (status ok) count, and a line's records sum to
the quantity it was measured with (tests pin the two against each other). A record's share of a
line's amount is its quantity over the line's: how the amount would split were it charged per
record. Records that a dispute or an SLA pause excluded are not billed; they show with that reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from clickhouse_store.queries.records import record_of, records_page
from ledger.models import LogLeaf
from ledger.selectors import b64
from pricing.dimensions import Dimension
from treemeter_records.timeutil import from_unix_nanos

from .exports import period_ns
from .models import Invoice, InvoiceLine
from .selectors import invoice_with_lines

PAGE_SIZE = 50
ZERO = Decimal(0)
SHARE_PLACES = Decimal("0.000001")


def _l3_seconds(record: dict[str, Any]) -> Decimal:
    micros = sum(h["latency_us"] for h in record["hops"] if h["layer"].lower() == "l3")
    return Decimal(micros) / Decimal(1_000_000)


RECORD_QUANTITY: dict[str, Callable[[dict[str, Any]], Decimal]] = {
    Dimension.REQUESTS: lambda r: Decimal(1),
    Dimension.TOKENS_IN: lambda r: Decimal(r["tokens_in"]),
    Dimension.TOKENS_OUT: lambda r: Decimal(r["tokens_out"]),
    Dimension.CACHED_TOKENS: lambda r: Decimal(r["prefix_cache_hit_tokens"]),
    Dimension.CACHE_WRITE_TOKENS: lambda r: Decimal(r.get("prefix_cache_write_tokens", 0)),  # optional
    Dimension.EXPERT_TOKENS: lambda r: Decimal(r["expert_tokens"]),
    Dimension.ROUTING_HOPS: lambda r: Decimal(len(r["hops"])),
    Dimension.L2_MISSES: lambda r: Decimal(r["expert_cache_misses"]),
    Dimension.L3_SECONDS: _l3_seconds,
    Dimension.DISTINCT_EXPERTS: lambda r: Decimal(r["distinct_experts"]),
}


def record_quantity(record: dict[str, Any], dimension: str) -> Decimal | None:
    """The record's quantity of a built-in dimension (0 unless it was served); None for a dimension
    that is not measured per record here (custom metrics, outcomes)."""
    measure = RECORD_QUANTITY.get(dimension)
    if measure is None:
        return None
    return measure(record) if record["status"] == "ok" else ZERO


@dataclass(frozen=True)
class Share:
    """A record's part of one invoice line."""

    line: InvoiceLine
    quantity: Decimal
    fraction: Decimal | None  # of the line's quantity; None when the line measured nothing
    amount: Decimal | None


def share_of(record: dict[str, Any], line: InvoiceLine) -> Share | None:
    quantity = record_quantity(record, line.dimension)
    if quantity is None or line.kind != InvoiceLine.Kind.USAGE:
        return None
    if not line.quantity:
        return Share(line, quantity, None, None)
    fraction = (quantity / line.quantity).quantize(SHARE_PLACES)
    return Share(line, quantity, fraction, (line.amount * quantity / line.quantity).quantize(SHARE_PLACES))


@dataclass(frozen=True)
class LineRecords:
    invoice: Invoice
    line: InvoiceLine
    total: int  # every record of the invoice's contract and period
    rows: list[tuple[dict[str, Any], Share | None]]
    page: int
    pages: int


def line_records(invoice: Invoice, line: InvoiceLine, page: int) -> LineRecords:
    """One page of the records of the line's invoice period, each with its share of the line."""
    start_ns, end_ns = period_ns(invoice)
    first = max(page, 1)
    total, records = records_page(
        invoice.tenant.code, invoice.contract.code, start_ns, end_ns, PAGE_SIZE, (first - 1) * PAGE_SIZE
    )
    pages = max((total + PAGE_SIZE - 1) // PAGE_SIZE, 1)
    return LineRecords(invoice, line, total, [(r, share_of(r, line)) for r in records], first, pages)


@dataclass(frozen=True)
class RecordView:
    record: dict[str, Any]
    invoice: Invoice | None  # the contract's invoice whose period holds the record
    shares: list[Share]
    leaf: LogLeaf | None  # its place in the verifiable log

    @property
    def leaf_hash(self) -> str:
        return "" if self.leaf is None else b64(bytes(self.leaf.leaf_hash))

    @property
    def experts_by_layer(self) -> list[tuple[int, list[dict[str, Any]]]]:
        layers: dict[int, list[dict[str, Any]]] = {}
        for expert in self.record["experts"]:
            layers.setdefault(expert["layer"], []).append(expert)
        return sorted(layers.items())


def record_view(record_id: str, tenant: str | None) -> RecordView | None:
    """A stored record the caller may see (`tenant`: its own only; None: staff), with its invoice and
    its share of each of that invoice's usage lines."""
    record = record_of(record_id, tenant)
    if record is None:
        return None
    start = from_unix_nanos(record["start_ns"])
    invoice = (
        Invoice.objects.filter(tenant__code=record["tenant"], contract__code=record["contract"])
        .filter(period_start__lte=start, period_end__gt=start)
        .order_by("-period_start")
        .first()
    )
    leaf = LogLeaf.objects.filter(record_id=record_id).first()
    if invoice is None:
        return RecordView(record, None, [], leaf)
    invoice = invoice_with_lines(invoice.pk)
    shares = [s for line in invoice.lines.all() if (s := share_of(record, line)) is not None]
    return RecordView(record, invoice, shares, leaf)
