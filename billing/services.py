"""Writes for billing: invoices from draft to paid, credits, coupons, notes.

Every write is safe to retry: invoices are unique per (contract, period) and made under a lock on the
contract row; numbering locks the issuing entity's sequence row; credit entries are unique per
reference; notes are checked against what the invoice still allows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from common.money import round_money
from contracts.models import NEVER_BILLED, Contract
from ingest.outbox import store_pending
from pricing.dimensions import Dimension
from pricing.errors import BillingError, TermsError

from . import events, outcomes
from .catalogue import with_catalogue
from .completeness import invoice_completeness
from .lateness import late_usage_adjustments, record_late_usage
from .models import (
    OPEN_STATUSES,
    Coupon,
    CreditEntry,
    Invoice,
    InvoiceLine,
    InvoiceSequence,
)
from .parties import invoice_parties, issuers
from .rating import BilledEvent, PeriodUsage, RatedInvoice, RatedLine, rate_period
from .selectors import credit_balance, latest_checkpoint, period_usage
from .service_credits import record_service_credits, release_service_credits, select_service_credits
from .terms import Terms, terms_of
from .webhook_events import publish_invoice_events

__all__ = ["BillingError", "TermsError", "generate_invoice"]


def generate_invoice(
    contract_id: int,
    period_start: datetime,
    period_end: datetime,
    *,
    usage: PeriodUsage | None = None,
    now: datetime | None = None,
) -> Invoice:
    """Rate a contract's records for a closed period into its invoice, and finalise it once the
    contract's grace period has passed. When a price changes within the period, the usage is measured
    per price segment (again, if `usage` was measured without them).

    Idempotent, also when run concurrently: the contract row is locked while the invoice is made, and
    a unique constraint on (contract, period) backs it up. A run during the grace period re-rates the
    draft (late records count); a run on a finalised invoice returns it unchanged. Pending SLA service
    credits of earlier months become credit lines in the same transaction (`billing.service_credits`).
    """
    now = now or timezone.now()
    check_period(period_start, period_end, now)
    store_pending()  # every committed record is in ClickHouse before it is rated
    try:
        with transaction.atomic():
            contract = Contract.objects.select_for_update().select_related("tenant").get(pk=contract_id)
            if contract.status in NEVER_BILLED:
                raise BillingError("contract_not_billable", f"Contract {contract.code} is {contract.status}.")
            if contract.sandbox:  # its invoices are previews (sandbox.selectors), never issued
                raise BillingError("contract_not_billable", f"Contract {contract.code} is a sandbox's.")
            invoice = Invoice.objects.filter(
                contract=contract, period_start=period_start, period_end=period_end
            ).first()
            if invoice is not None and invoice.status not in OPEN_STATUSES:
                return invoice
            terms = terms_of(contract, period_start, period_end)
            bounds = terms.change_instants(period_start, period_end)
            if (
                usage is None
                or (bounds and tuple(s.start for s in usage.segments[1:]) != bounds)
                or set(terms.events) - set(usage.events)
            ):
                usage = period_usage(
                    contract.tenant.code,
                    contract.code,
                    period_start,
                    period_end,
                    terms.metrics,
                    bounds=bounds,
                    events=terms.events,
                )
            terms, usage = with_catalogue(contract, terms, usage, period_start, period_end)
            outcome_refs: list[str] = []
            if any(c.dimension == Dimension.OUTCOMES for c in terms.charges):
                usage, outcome_refs = _with_outcomes(contract, usage, period_start, period_end, now)
            used = _coupon_uses(contract, exclude=invoice) if terms.coupons else Counter[str]()
            late = late_usage_adjustments(contract, period_start, now)
            adjustments = late.lines
            rated = rate_period(
                terms, usage, period_start, period_end, coupons_used=used, adjustments=adjustments
            )
            sla_credits = select_service_credits(
                contract, invoice, period_start, terms.currency, rated.subtotal
            )
            if sla_credits.lines:
                rated = rate_period(
                    terms,
                    usage,
                    period_start,
                    period_end,
                    coupons_used=used,
                    adjustments=adjustments,
                    credits=sla_credits.lines,
                )
            for line in rated.lines:
                if line.kind == "usage" and line.dimension == Dimension.OUTCOMES:
                    line.details["outcomes"] = outcome_refs
                    line.details["condition"] = terms.outcome_rule
                if line.kind == "usage" and line.dimension in usage.events:
                    line.details["events"] = billed_events(line, usage.events[line.dimension])
            invoice = _write_draft(contract, invoice, terms, usage, rated, period_start, period_end)
            record_late_usage([(late, invoice)])
            record_service_credits(invoice, sla_credits, now)
            if now >= invoice.grace_until:  # type: ignore[operator]
                invoice = finalize_invoice(invoice, now=now)
            return invoice
    except IntegrityError:
        return Invoice.objects.get(contract_id=contract_id, period_start=period_start, period_end=period_end)


def check_period(start: datetime, end: datetime, now: datetime) -> None:
    """BillingError unless [start, end) is a closed period."""
    if end > now:
        raise BillingError("period_open", f"The period ending {end.isoformat()} has not closed yet.")
    if start >= end:
        raise BillingError("invalid_period", "The period must start before it ends.")


def _with_outcomes(
    contract: Contract, usage: PeriodUsage, start: datetime, end: datetime, now: datetime
) -> tuple[PeriodUsage, list[str]]:
    """Usage plus the confirmed, unbilled outcomes (count, and their value for percentage charges)."""
    outcomes.sync_record_outcomes(contract, start, end)
    outcomes.expire_outcomes(now, [contract])
    count, value, refs = outcomes.billable_outcomes(contract, end)
    quantities = {**usage.quantities, Dimension.OUTCOMES: count}
    values = {**usage.values, Dimension.OUTCOMES: value}
    return replace(usage, quantities=quantities, values=values), refs


def billed_events(line: RatedLine, events: Sequence[BilledEvent]) -> list[dict[str, object]]:
    """What a business-event line states it bills: each event with its records (a price version's line:
    the events that started in its segment; a period-bound line: none, it bills no events of its own)."""
    if "bound" in line.details:
        return []
    if "segment_start" in line.details:
        start = datetime.fromisoformat(line.details["segment_start"])
        end = datetime.fromisoformat(line.details["segment_end"])
        events = [e for e in events if start <= e.started < end]
    return [e.as_json() for e in events]


def _coupon_uses(contract: Contract, exclude: Invoice | None) -> Counter[str]:
    lines = InvoiceLine.objects.filter(invoice__contract=contract, kind=InvoiceLine.Kind.DISCOUNT).exclude(
        invoice__status=Invoice.Status.VOID
    )
    if exclude is not None:
        lines = lines.exclude(invoice=exclude)
    return Counter(line.details.get("coupon", "") for line in lines)


def _write_draft(
    contract: Contract,
    invoice: Invoice | None,
    terms: Terms,
    usage: PeriodUsage,
    rated: RatedInvoice,
    start: datetime,
    end: datetime,
) -> Invoice:
    fields = draft_fields(contract, terms, usage, rated, end)
    if invoice is None:
        invoice = Invoice.objects.create(
            contract=contract,
            tenant=contract.tenant,
            period_start=start,
            period_end=end,
            currency=terms.currency,
            **fields,
        )
    else:
        for name, value in fields.items():
            setattr(invoice, name, value)
        invoice.save()
        invoice.lines.all().delete()
    InvoiceLine.objects.bulk_create(invoice_lines(invoice, rated))
    return invoice


def draft_fields(
    contract: Contract, terms: Terms, usage: PeriodUsage, rated: RatedInvoice, end: datetime
) -> dict[str, object]:
    """The invoice fields a (re-)rating sets: amounts, the frozen terms with the measured quantities,
    the grace period and status. Shared by generate_invoice and the batch run (`billing.invoice_run`)."""
    return {
        "record_count": usage.record_count,
        "subtotal": rated.subtotal,
        "tax": rated.tax,
        "total": rated.total,
        "amount_due": rated.total,
        "terms": {
            **terms.as_json(),
            "quantities": {k: str(v) for k, v in usage.quantities.items()},
            **({"exclusions": usage.excluded} if usage.excluded else {}),
            **({"segments": [s.to_json() for s in usage.segments]} if usage.segments else {}),
        },
        "grace_until": end + timedelta(days=contract.grace_days),
        "status": Invoice.Status.GRACE if contract.grace_days else Invoice.Status.DRAFT,
        "issuing_entity": contract.issuing_entity,
    }


def invoice_lines(invoice: Invoice, rated: RatedInvoice) -> list[InvoiceLine]:
    """The rated lines as rows of `invoice`, at the precision they are stored with."""
    return [
        InvoiceLine(
            invoice=invoice,
            kind=line.kind,
            dimension=line.dimension,
            description=_describe(line)[:200],
            quantity=line.quantity.quantize(Decimal("1E-6")),
            unit_price=line.unit_price.quantize(Decimal("1E-8")),
            amount=line.amount,
            details=line.details,
        )
        for line in rated.lines
    ]


def _describe(line: RatedLine) -> str:
    """The line's description; an outcome line also names the verification condition it was billed under."""
    condition = line.details.get("condition")
    return f"{line.description} (verified: {condition})" if condition else line.description


def take_numbers(entity: str, count: int = 1) -> list[str]:
    """The entity's next `count` invoice numbers, in order: its sequence row is locked (until the
    transaction ends) and advanced once, so numbers stay gapless also when taken in bulk."""
    sequence, _ = InvoiceSequence.objects.select_for_update().get_or_create(issuing_entity=entity)
    first = sequence.last_number + 1
    sequence.last_number += count
    sequence.save(update_fields=["last_number"])
    return [f"{entity.upper()}-{n:06d}" for n in range(first, first + count)]


def finalize_invoice(invoice: Invoice, *, now: datetime | None = None) -> Invoice:
    """Number the invoice (gapless per issuing entity, in the same transaction), consume prepaid
    credits, and freeze it. Already finalised: returned unchanged."""
    now = now or timezone.now()
    with transaction.atomic():
        # The contract row first (as generate_invoice takes it): it serialises spending the wallet.
        list(Contract.objects.select_for_update().filter(pk=invoice.contract_id).values_list("pk", flat=True))
        invoice = Invoice.objects.select_for_update().get(pk=invoice.pk)
        if invoice.status not in OPEN_STATUSES:
            return invoice
        applied, allocation = credit_allocation(
            invoice, invoice.lines.all(), credit_balance(invoice.contract_id)
        )
        if applied:
            consumption(invoice, applied).save()
        set_final(
            invoice,
            applied,
            allocation,
            number=take_numbers(invoice.issuing_entity)[0],
            now=now,
            checkpoint=latest_checkpoint(),
            completeness=completeness_statement(invoice),
            parties=invoice_parties(invoice.contract, issuers([invoice.contract.issuing_entity]), now),
        )
        if any(c["dimension"] == Dimension.OUTCOMES for c in invoice.terms.get("charges", [])):
            outcomes.mark_billed(invoice)
        invoice.save()
        announce_finalised([invoice])
        return invoice


def set_final(
    invoice: Invoice,
    applied: Decimal,
    allocation: dict[str, str],
    *,
    number: str,
    now: datetime,
    checkpoint: dict[str, object] | None,
    completeness: dict[str, object] | None,
    parties: dict[str, object],
) -> None:
    """The fields finalisation sets on the (unsaved) invoice: credits, number, status, and what the
    terms pin: the credit allocation, the ledger checkpoint and the completeness statement."""
    invoice.credits_applied = applied
    invoice.owe()
    invoice.terms = {**invoice.terms, "credit_allocation": allocation, "parties": parties}
    invoice.number = number
    invoice.status = Invoice.Status.FINALIZED
    invoice.finalized_at = now
    if checkpoint is not None:
        invoice.terms["ledger_checkpoint"] = checkpoint
    if completeness is not None:
        invoice.terms["completeness"] = completeness


def consumption(invoice: Invoice, applied: Decimal) -> CreditEntry:
    """The (unsaved) wallet entry spending `applied` on the invoice: once per invoice, by its reference."""
    return CreditEntry(
        contract_id=invoice.contract_id,
        kind=CreditEntry.Kind.CONSUME,
        amount=-applied,
        invoice=invoice,
        reference=f"invoice:{invoice.pk}",
    )


def announce_finalised(invoices: Sequence[Invoice]) -> None:
    """The `invoice.finalized` webhook events, and `events.invoices_finalised` (the Stripe push)."""
    publish_invoice_events("invoice.finalized", invoices)
    events.invoices_finalised.send(sender=Invoice, invoices=list(invoices))


def completeness_statement(invoice: Invoice) -> dict[str, object]:
    """What the invoice states about its evidence when finalised: the records it bills, the records the
    log holds for its contract and period, and each serving agent's open sequence gaps. Kept in the
    invoice's terms, so the document never changes when a gap closes later."""
    return statement_of(invoice, invoice_completeness(invoice))


def statement_of(invoice: Invoice, report: dict[str, Any]) -> dict[str, object]:
    """The completeness statement from the ledger's report on the invoice (`invoice_completeness`)."""
    return {
        "records": invoice.record_count,
        "logged_records": report["logged_records"],
        "excluded_records": report["excluded_records"],
        "gaps": [
            {"agent_id": agent["agent_id"], "first_seq": first, "last_seq": last}
            for agent in report["agents"]
            for first, last in agent["gaps"]
        ],
        "complete": report["complete"],
    }


def credit_allocation(
    invoice: Invoice, lines: Iterable[InvoiceLine], balance: Decimal
) -> tuple[Decimal, dict[str, str]]:
    """How much of the wallet's `balance` pays this invoice: the line kinds the contract's credit order
    names, in that order (each with its share of exclusive tax), up to the balance. Empty order: every
    line. `lines`: the invoice's lines (read only when the order needs them)."""
    if balance <= 0 or invoice.total <= 0:
        return Decimal(0), {}
    order = list(invoice.terms.get("credit_order") or [])
    rate = Decimal(invoice.terms.get("tax_rate", "0"))
    gross = Decimal(1) if invoice.terms.get("tax_inclusive") else 1 + rate
    allocation: dict[str, str] = {}
    left = min(balance, invoice.total)
    if not order:
        return left, {"all": str(left)}
    applied = Decimal(0)
    for kind in order:
        of_kind = [line for line in lines if line.kind == kind]
        if invoice.terms.get("taxes"):  # taxed per line: each line with its own taxes (when exclusive)
            added = Decimal(0) if invoice.terms.get("tax_inclusive") else Decimal(1)
            due = sum(
                (
                    x.amount
                    + added * sum((Decimal(t["amount"]) for t in x.details.get("taxes", [])), Decimal(0))
                    for x in of_kind
                ),
                Decimal(0),
            )
        else:
            due = round_money(sum((line.amount for line in of_kind), Decimal(0)) * gross, invoice.currency)
        take = max(min(due, left - applied), Decimal(0))
        if take:
            allocation[kind] = str(take)
            applied += take
    return applied, allocation


def void_invoice(invoice: Invoice, *, now: datetime | None = None) -> Invoice:
    """finalized → void: the number stays used (no gap), consumed credits go back to the wallet and
    SLA service credits it carried become pending again (for the next invoice)."""
    with transaction.atomic():
        invoice = Invoice.objects.select_for_update().get(pk=invoice.pk)
        if invoice.status == Invoice.Status.VOID:
            return invoice
        if invoice.status != Invoice.Status.FINALIZED:
            raise BillingError("invalid_transition", f"A {invoice.status} invoice cannot be voided.")
        if invoice.credits_applied:
            CreditEntry.objects.create(
                contract=invoice.contract,
                kind=CreditEntry.Kind.GRANT,
                amount=invoice.credits_applied,
                invoice=invoice,
                reference=f"void:{invoice.pk}",
            )
        invoice.status = Invoice.Status.VOID
        invoice.voided_at = now or timezone.now()
        invoice.save(update_fields=["status", "voided_at"])
        release_service_credits(invoice)
        return invoice


def grant_credits(contract: Contract, amount: Decimal, reference: str) -> CreditEntry:
    """Add prepaid credits to the contract's wallet; the same reference again returns the first entry."""
    if amount <= 0 or round_money(amount, contract.currency) != amount:
        raise TermsError(
            "invalid_amount",
            f"Credits must be positive in whole {contract.currency} minor units, not {amount}.",
        )
    entry, _ = CreditEntry.objects.get_or_create(
        contract=contract, reference=reference, defaults={"kind": CreditEntry.Kind.GRANT, "amount": amount}
    )
    return entry


def add_coupon(
    contract: Contract,
    code: str,
    *,
    percent_off: Decimal | None = None,
    amount_off: Decimal | None = None,
    periods: int | None = None,
) -> Coupon:
    if (percent_off is None) == (amount_off is None):
        raise TermsError("invalid_coupon", "A coupon has either percent_off or amount_off.")
    if percent_off is not None and not 0 < percent_off <= 1:
        raise TermsError(
            "invalid_coupon", f"percent_off is a fraction in (0, 1] (0.1 = 10 %), not {percent_off}."
        )
    if amount_off is not None and amount_off <= 0:
        raise TermsError("negative_price", f"amount_off must be positive, not {amount_off}.")
    coupon, _ = Coupon.objects.get_or_create(
        contract=contract,
        code=code,
        defaults={"percent_off": percent_off, "amount_off": amount_off, "periods": periods},
    )
    return coupon
