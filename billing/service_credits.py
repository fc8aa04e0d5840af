"""Invoice credits on invoices: what the registered credit source (`billing.adjustments`) says is due.

sla registers its service credits: a closed SLA month that earned a credit leaves one pending
`sla.ServiceCredit`, and the contract's next invoice for a later month carries it. Each credit becomes
one negative `service_credit` line, rated before tax (the credit lowers the taxable base, as a price
reduction does), and the source learns which line applied it, in the invoice run's transaction under
the contract lock: applied exactly once, however often or concurrently the run goes.

Not applied, and reported (to the source with the reason, and in `invoice.terms["service_credits_held"]`):
a credit in another currency than the invoice, or one larger than what the invoice's other lines
leave (an invoice never goes below 0). Held credits stay due for the next invoice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from contracts.models import Contract

from .adjustments import InvoiceCredit, registered_sources
from .models import Invoice, InvoiceLine
from .rating import RatedLine

__all__ = [
    "CreditSelection",
    "contracts_with_service_credits",
    "record_service_credits",
    "release_service_credits",
    "select_service_credits",
]


@dataclass
class CreditSelection:
    lines: list[RatedLine] = field(default_factory=list)
    applied: list[InvoiceCredit] = field(default_factory=list)
    held: list[tuple[InvoiceCredit, str]] = field(default_factory=list)


def select_service_credits(
    contract: Contract,
    invoice: Invoice | None,
    period_start: datetime,
    currency: str,
    room: Decimal,
) -> CreditSelection:
    """The source locks the contract's due credits (and those already on this draft, which a re-rate
    puts on again), oldest first; each becomes a line while it fits in `room`."""
    source = registered_sources().credits
    selection = CreditSelection()
    for credit in source.pending(contract.pk, invoice, period_start) if source is not None else ():
        if credit.currency != currency:
            selection.held.append(
                (credit, f"currency_mismatch: the credit is in {credit.currency}, the invoice in {currency}")
            )
        elif credit.amount > room:
            selection.held.append(
                (credit, f"exceeds_invoice: {credit.amount} {currency} is more than the {room} left")
            )
        elif credit.amount > 0:
            room -= credit.amount
            selection.applied.append(credit)
            selection.lines.append(credit_line(credit))
    return selection


def credit_line(credit: InvoiceCredit) -> RatedLine:
    """The negative line, described as the source describes the credit."""
    return RatedLine(
        dimension="",
        description=credit.description[:200],
        quantity=Decimal(1),
        unit_price=-credit.amount,
        amount=-credit.amount,
        kind=InvoiceLine.Kind.SERVICE_CREDIT,
        details={"service_credit": credit.reference, **credit.details},
    )


def contracts_with_service_credits(
    contract_ids: Sequence[int], draft_ids: Sequence[int], period_start: datetime
) -> set[int]:
    """Which of the contracts have credits due (or on one of these open drafts): one read."""
    source = registered_sources().credits
    return set() if source is None else source.contracts_with_pending(contract_ids, draft_ids, period_start)


def record_service_credits(invoice: Invoice, selection: CreditSelection, now: datetime) -> None:
    """After the draft's lines are written: the source links each applied credit to its line and
    keeps held ones due; the invoice reports the held ones."""
    source = registered_sources().credits
    if source is not None and (selection.applied or selection.held):
        lines = {
            line.details["service_credit"]: line
            for line in invoice.lines.filter(kind=InvoiceLine.Kind.SERVICE_CREDIT)
        }
        applied = [(credit, lines[credit.reference]) for credit in selection.applied]
        source.record(invoice, applied, selection.held, now)
    if selection.held:
        invoice.terms = {
            **invoice.terms,
            "service_credits_held": [{"service_credit": c.reference, "reason": r} for c, r in selection.held],
        }
        invoice.save(update_fields=["terms"])


def release_service_credits(invoice: Invoice) -> int:
    """A voided invoice gives its credits back: due again, for the contract's next invoice."""
    source = registered_sources().credits
    return 0 if source is None else source.release(invoice)
