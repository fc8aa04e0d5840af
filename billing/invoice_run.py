"""The invoice run in batches: the same invoices `generate_invoice` makes one contract at a time, with a
few statements per chunk of contracts instead of some forty per contract.

Each chunk is one transaction. It locks the chunk's contract rows, then their tenants, then the
invoice-sequence rows of the issuing entities it may number (each set ordered by key, and in the
order generate_invoice takes them, so concurrent runs queue instead of deadlocking), and reads the
period's invoices of the chunk in one query: a finalised one stays as it is, an open one is re-rated.
Terms and rating are the pure `terms_of` / `rate_period`; invoices, lines and wallet entries are bulk
inserts; the invoices the chunk finalises take their numbers with one sequence update per issuing
entity (in contract order, gapless); the ledger checkpoint is read once and the completeness
statements come from one set-based ledger read per chunk.

Contracts with rare features go through `generate_invoice` itself, inside the chunk's transaction:
outcome charges, coupons, invoice credits due (SLA service credits pending or on the open draft, from
the registered credit source: `billing.adjustments`), usage the run could not measure (or not per
price segment, or not per model and day for a contract priced by the LLM price catalogue). The
catalogue versions the chunk's contracts use are read once per chunk and currency. Late usage of
earlier periods is re-measured for the chunk at once (`LateUsageCheck`, which generate_invoice uses
for one contract).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import Sum

from accounts.models import Tenant
from catalog.models import ModelPrice
from clickhouse_store.queries.billing import CatalogueDay
from common.pg_copy import copy_insert, copy_rows
from contracts.models import NEVER_BILLED, Contract
from metrics.instruments import INVOICE_RUN_CONTRACTS, INVOICE_RUN_SECONDS
from pricing.dimensions import Dimension
from pricing.errors import BillingError

from .catalogue import catalogue_versions, with_catalogue
from .completeness import invoices_completeness
from .lateness import LateUsageCheck, LateUsageFound, late_usage_adjustments, record_late_usage
from .models import OPEN_STATUSES, CreditEntry, Invoice, InvoiceLine, InvoiceSequence
from .parties import invoice_parties, issuers
from .rating import PeriodUsage, RatedInvoice, RatedLine, rate_period
from .selectors import latest_checkpoint
from .service_credits import contracts_with_service_credits
from .services import (
    announce_finalised,
    check_period,
    consumption,
    credit_allocation,
    draft_fields,
    generate_invoice,
    invoice_lines,
    set_final,
    statement_of,
    take_numbers,
)
from .terms import Terms, TermsRows, terms_of, terms_rows

CHUNK = 250
CENT = Decimal("0.01")  # the invoice amounts' stored precision
_REFRESHED = [  # what a re-rate and finalisation change on an open invoice
    "record_count",
    "subtotal",
    "tax",
    "total",
    "amount_due",
    "terms",
    "grace_until",
    "status",
    "issuing_entity",
    "credits_applied",
    "number",
    "finalized_at",
]

Progress = Callable[[int, int], None]


_LINE_COLUMNS = (
    "invoice_id",
    "kind",
    "dimension",
    "description",
    "quantity",
    "unit_price",
    "amount",
    "details",
)
QUANTITY, UNIT_PRICE = Decimal("1E-6"), Decimal("1E-8")  # the lines' stored precisions


@dataclass
class _Rated:
    contract: Contract
    invoice: Invoice
    rated: RatedInvoice
    is_new: bool
    late: LateUsageFound


def invoice_contracts(
    contracts: Sequence[Contract],
    start: datetime,
    end: datetime,
    usage: Mapping[str, PeriodUsage],
    *,
    now: datetime,
    progress: Progress | None = None,
) -> tuple[int, dict[str, str]]:
    """Invoice the contracts for [start, end) with the usage measured for them, chunk by chunk (in
    the given order; pass them ordered by pk). Returns how many invoices are finalised and, per
    contract code, why one could not be billed. `progress(done, total)` runs per contract once its
    chunk has committed. The run's duration and progress go to metrics.instruments (`/metrics`)."""
    began = time.perf_counter()
    INVOICE_RUN_CONTRACTS.labels("total").set(len(contracts))
    INVOICE_RUN_CONTRACTS.labels("done").set(0)
    finalized, failed = 0, {}
    try:
        check_period(start, end, now)
        closed = True
    except BillingError as error:  # as generate_invoice answers it for each contract
        failed = {c.code: f"{error.code}: {error.message}" for c in contracts}
        closed = False
    for first in range(0, len(contracts), CHUNK):
        part = contracts[first : first + CHUNK]
        if closed:
            with transaction.atomic():
                made, errors = _invoice_chunk([c.pk for c in part], start, end, usage, now)
            finalized += made
            failed.update(errors)
        INVOICE_RUN_CONTRACTS.labels("done").set(first + len(part))
        if progress is not None:
            for done in range(first + 1, first + len(part) + 1):
                progress(done, len(contracts))
    INVOICE_RUN_SECONDS.observe(time.perf_counter() - began)
    return finalized, failed


def _invoice_chunk(
    ids: list[int], start: datetime, end: datetime, usage: Mapping[str, PeriodUsage], now: datetime
) -> tuple[int, dict[str, str]]:
    locked = Contract.objects.select_for_update(of=("self",)).filter(pk__in=ids).order_by("pk")
    tenant_ids = set(locked.values_list("tenant_id", flat=True))
    list(Tenant.objects.select_for_update().filter(pk__in=tenant_ids).order_by("pk").values_list("pk"))
    contracts = list(Contract.objects.filter(pk__in=ids).select_related("tenant").order_by("pk"))
    existing = {
        i.contract_id: i
        for i in Invoice.objects.filter(contract_id__in=ids, period_start=start, period_end=end)
    }
    finalized, failed = 0, {}
    todo = []
    for contract in contracts:
        invoice = existing.get(contract.pk)
        if contract.status in NEVER_BILLED:
            failed[contract.code] = f"contract_not_billable: Contract {contract.code} is {contract.status}."
        elif invoice is not None and invoice.status not in OPEN_STATUSES:
            finalized += invoice.number is not None
        else:
            todo.append(contract)
    if not todo:
        return finalized, failed
    _lock_sequences({c.issuing_entity for c in todo if now >= end + timedelta(days=c.grace_days)})
    batch, fallback = _split(todo, terms_rows([c.pk for c in todo]), existing, start, end, usage, failed)
    for contract in fallback:
        try:
            invoice = generate_invoice(contract.pk, start, end, usage=usage.get(contract.code), now=now)
            finalized += invoice.number is not None
        except BillingError as error:
            failed[contract.code] = f"{error.code}: {error.message}"
    billed_before = set(
        Invoice.objects.filter(
            contract_id__in=[c.pk for c, _ in batch],
            status__in=[Invoice.Status.FINALIZED, Invoice.Status.PAID],
            period_end__lte=start,
        )
        .order_by()  # not the model's ordering: it joins the contracts to sort by code
        .values_list("contract_id", flat=True)
    )
    try:
        late: LateUsageCheck | None = LateUsageCheck.prepare(
            [c for c, _ in batch if c.pk in billed_before], start
        )
    except BillingError:  # an earlier invoice's frozen metric no longer compiles: each contract alone
        late = None
    versions = _catalogue_versions(batch, usage, start, end)
    rated = []
    for contract, terms in batch:
        try:
            terms, measured = with_catalogue(
                contract, terms, usage[contract.code], start, end, versions=versions.get(terms.currency)
            )
            found = LateUsageFound([], [])
            if contract.pk in billed_before:  # late records of those periods: adjustment lines
                found = (
                    late.adjustments(contract, now) if late else late_usage_adjustments(contract, start, now)
                )
            invoice = existing.get(contract.pk)
            rated.append(_rate(contract, invoice, terms, measured, found, start, end))
        except BillingError as error:
            failed[contract.code] = f"{error.code}: {error.message}"
    return finalized + _write(rated, now), failed


def _catalogue_versions(
    batch: list[tuple[Contract, Terms]], usage: Mapping[str, PeriodUsage], start: datetime, end: datetime
) -> dict[str, list[ModelPrice]]:
    """Per currency, the catalogue versions the chunk's contracts priced by the catalogue use: one read
    per currency instead of one per contract."""
    by_currency: dict[str, list[tuple[CatalogueDay, ...]]] = defaultdict(list)
    for contract, terms in batch:
        days = usage[contract.code].catalogue
        if terms.catalogue is not None and days is not None:
            by_currency[terms.currency].append(days)
    return {
        currency: catalogue_versions(currency, usages, start, end) for currency, usages in by_currency.items()
    }


def _lock_sequences(entities: set[str]) -> None:
    """The sequence rows of these issuing entities, locked in name order (made when missing)."""
    rows = InvoiceSequence.objects.select_for_update().filter(issuing_entity__in=entities)
    if len(list(rows.order_by("issuing_entity").values_list("pk"))) < len(entities):
        InvoiceSequence.objects.bulk_create(
            [InvoiceSequence(issuing_entity=e) for e in sorted(entities)], ignore_conflicts=True
        )
        list(rows.order_by("issuing_entity").values_list("pk"))


def _split(
    todo: list[Contract],
    rows: Mapping[int, TermsRows],
    existing: Mapping[int, Invoice],
    start: datetime,
    end: datetime,
    usage: Mapping[str, PeriodUsage],
    failed: dict[str, str],
) -> tuple[list[tuple[Contract, Terms]], list[Contract]]:
    """The contracts the batch path bills (with their terms), and those generate_invoice bills alone;
    a contract whose terms cannot be billed goes to `failed`."""
    drafts = [existing[c.pk].pk for c in todo if c.pk in existing]
    credited = contracts_with_service_credits([c.pk for c in todo], drafts, start)
    batch, fallback = [], []
    for contract in todo:
        try:
            terms = terms_of(contract, start, end, rows=rows[contract.pk])
        except BillingError as error:
            failed[contract.code] = f"{error.code}: {error.message}"
            continue
        measured = usage.get(contract.code)
        bounds = terms.change_instants(start, end)
        if (
            measured is None
            or (bounds and tuple(s.start for s in measured.segments[1:]) != bounds)
            or terms.coupons
            or (terms.catalogue is not None and measured.catalogue is None)
            or any(c.dimension == Dimension.OUTCOMES for c in terms.charges)
            or terms.events
            or contract.pk in credited
        ):
            fallback.append(contract)
        else:
            batch.append((contract, terms))
    return batch, fallback


def _rate(
    contract: Contract,
    invoice: Invoice | None,
    terms: Terms,
    usage: PeriodUsage,
    late: LateUsageFound,
    start: datetime,
    end: datetime,
) -> _Rated:
    """The contract's draft (not saved): rated as generate_invoice rates it, amounts as stored."""
    rated = rate_period(terms, usage, start, end, adjustments=late.lines)
    is_new = invoice is None
    if invoice is None:
        invoice = Invoice(
            contract=contract,
            tenant=contract.tenant,
            period_start=start,
            period_end=end,
            currency=terms.currency,
        )
    for name, value in draft_fields(contract, terms, usage, rated, end).items():
        setattr(invoice, name, value)
    for name in ("subtotal", "tax", "total", "amount_due"):
        setattr(invoice, name, getattr(invoice, name).quantize(CENT))
    return _Rated(contract, invoice, rated, is_new, late)


def _write(rated: list[_Rated], now: datetime) -> int:
    """Finalise the drafts whose grace period has passed, then store all of them with their lines,
    wallet entries and late-usage links; announce the finalised ones. Returns how many were."""
    final = [r for r in rated if now >= r.invoice.grace_until]  # type: ignore[operator]
    balances = dict(
        CreditEntry.objects.filter(contract_id__in=[r.contract.pk for r in final])
        .values("contract_id")
        .annotate(total=Sum("amount"))
        .order_by()
        .values_list("contract_id", "total")
    )
    numbers: dict[str, list[str]] = {}
    per_entity: dict[str, int] = defaultdict(int)
    for r in final:
        per_entity[r.invoice.issuing_entity] += 1
    for entity in sorted(per_entity):
        numbers[entity] = take_numbers(entity, per_entity[entity])
    checkpoint = latest_checkpoint() if final else None
    known = issuers(r.contract.issuing_entity for r in final)
    statements = _statements([r.invoice for r in final])
    applied: dict[int, Decimal] = {}
    for r, completeness in zip(final, statements, strict=True):
        invoice = r.invoice
        balance = balances.get(r.contract.pk, Decimal("0.00"))
        # The lines as models only where the wallet pays by line kind (credit_allocation reads them then).
        lines = invoice_lines(invoice, r.rated) if balance > 0 and invoice.terms.get("credit_order") else []
        applied[r.contract.pk], allocation = credit_allocation(invoice, lines, balance)
        number = numbers[invoice.issuing_entity].pop(0)
        set_final(
            invoice,
            applied[r.contract.pk],
            allocation,
            number=number,
            now=now,
            checkpoint=checkpoint,
            completeness=completeness,
            parties=invoice_parties(r.contract, known, now),
        )
    copy_insert([r.invoice for r in rated if r.is_new])
    reopened = [r.invoice for r in rated if not r.is_new]
    if reopened:
        InvoiceLine.objects.filter(invoice__in=reopened).delete()
        Invoice.objects.bulk_update(reopened, _REFRESHED)
    copy_rows(InvoiceLine, _LINE_COLUMNS, (_line_row(r.invoice.pk, x) for r in rated for x in r.rated.lines))
    CreditEntry.objects.bulk_create(
        consumption(r.invoice, applied[r.contract.pk]) for r in final if applied[r.contract.pk]
    )
    record_late_usage((r.late, r.invoice) for r in rated)
    announce_finalised([r.invoice for r in final])
    return len(final)


def _line_row(invoice_id: int, line: RatedLine) -> tuple[object, ...]:
    """One rated line as the row `services.invoice_lines` stores (in `_LINE_COLUMNS` order)."""
    condition = line.details.get("condition")
    description = f"{line.description} (verified: {condition})" if condition else line.description
    return (
        invoice_id,
        line.kind,
        line.dimension,
        description[:200],
        line.quantity.quantize(QUANTITY),
        line.unit_price.quantize(UNIT_PRICE),
        line.amount,
        line.details,
    )


def _statements(invoices: list[Invoice]) -> list[dict[str, object]]:
    """Each invoice's completeness statement, from one batch read."""
    if not invoices:
        return []
    return [
        statement_of(i, report) for i, report in zip(invoices, invoices_completeness(invoices), strict=True)
    ]
