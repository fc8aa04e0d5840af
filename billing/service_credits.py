"""SLA service credits on invoices: the hand-off from `sla.services.close_period`.

A closed SLA month that earned a credit leaves one pending `sla.ServiceCredit`. The contract's next
invoice for a later month (the credit's YYYY-MM before the invoice period's) carries it as one negative
`service_credit` line, rated before tax (the credit lowers the taxable base, as a price reduction
does), and the credit is marked applied with a link to the line, in the invoice run's transaction
under the contract lock: applied exactly once, however often or concurrently the run goes.

Not applied, and reported (`ServiceCredit.held_reason`, `invoice.terms["service_credits_held"]`):
a credit in another currency than the invoice, or one larger than what the invoice's other lines
leave (an invoice never goes below 0). Held credits stay pending for the next invoice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Q

from contracts.models import Contract
from sla.models import ServiceCredit

from .models import Invoice, InvoiceLine
from .rating import RatedLine

__all__ = ["CreditSelection", "record_service_credits", "release_service_credits", "select_service_credits"]


@dataclass
class CreditSelection:
    lines: list[RatedLine] = field(default_factory=list)
    applied: list[ServiceCredit] = field(default_factory=list)
    held: list[tuple[ServiceCredit, str]] = field(default_factory=list)


def select_service_credits(
    contract: Contract,
    invoice: Invoice | None,
    period_start: datetime,
    currency: str,
    room: Decimal,
) -> CreditSelection:
    """Lock the contract's pending credits of earlier months (and those already on this draft,
    which a re-rate puts on again), oldest first; each becomes a line while it fits in `room`."""
    mine = Q(status=ServiceCredit.Status.PENDING)
    if invoice is not None:
        mine |= Q(invoice=invoice)
    credits = (
        ServiceCredit.objects.select_for_update(of=("self",))
        .filter(mine, contract=contract, month__lt=f"{period_start:%Y-%m}")
        .select_related("report")
        .order_by("month", "pk")
    )
    selection = CreditSelection()
    for credit in credits:
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


def credit_line(credit: ServiceCredit) -> RatedLine:
    """The negative line, naming the report: objective, measured value, target, ladder step."""
    report = credit.report
    results = [r for r in report.objectives if Decimal(r["credit_percent"]) > 0]
    worst = max(results, key=lambda r: Decimal(r["credit_percent"]), default=None)
    step = _ladder_step(report.terms, worst)
    percent = credit.credit_percent.normalize()
    if worst is None:
        why = ""
    else:
        why = f": {worst['name']} {worst['measured_percent']} % vs target {worst['target_percent']} %"
        if step is not None:
            why += f" (< {Decimal(step['below_percent']).normalize()} % → {percent} %)"
    description = f"SLA service credit {percent} % for {credit.month}{why}, SLA report #{report.pk}"
    return RatedLine(
        dimension="",
        description=description[:200],
        quantity=Decimal(1),
        unit_price=-credit.amount,
        amount=-credit.amount,
        kind=InvoiceLine.Kind.SERVICE_CREDIT,
        details={
            "service_credit": credit.pk,
            "sla_report": report.pk,
            "month": credit.month,
            "period_start": report.period_start.isoformat(),
            "period_end": report.period_end.isoformat(),
            "objective": None if worst is None else worst["name"],
            "measured_percent": None if worst is None else worst["measured_percent"],
            "target_percent": None if worst is None else worst["target_percent"],
            "ladder_step": step,
            "credit_percent": str(credit.credit_percent),
            "fee_basis": str(credit.fee_basis),
        },
    )


def _ladder_step(terms: dict[str, Any], result: dict[str, Any] | None) -> dict[str, str] | None:
    """The rung the objective fell on: the lowest threshold it is below with the credit it earned."""
    if result is None or result["measured_percent"] is None:
        return None
    objective = next((o for o in terms.get("objectives", []) if o["name"] == result["name"]), None)
    steps = [
        s
        for s in (objective or {}).get("credit_ladder", [])
        if Decimal(s["credit_percent"]) == Decimal(result["credit_percent"])
        and Decimal(result["measured_percent"]) < Decimal(s["below_percent"])
    ]
    return min(steps, key=lambda s: Decimal(s["below_percent"]), default=None)


def record_service_credits(invoice: Invoice, selection: CreditSelection, now: datetime) -> None:
    """After the draft's lines are written: link each applied credit to its line, report held ones."""
    lines = {
        line.details["service_credit"]: line
        for line in invoice.lines.filter(kind=InvoiceLine.Kind.SERVICE_CREDIT)
    }
    for credit in selection.applied:
        credit.status = ServiceCredit.Status.APPLIED
        credit.invoice = invoice
        credit.invoice_line = lines[credit.pk]
        credit.applied_at = credit.applied_at or now
        credit.held_reason = ""
        credit.save(update_fields=["status", "invoice", "invoice_line", "applied_at", "held_reason"])
    for credit, reason in selection.held:
        credit.status = ServiceCredit.Status.PENDING
        credit.invoice = None
        credit.invoice_line = None
        credit.applied_at = None
        credit.held_reason = reason[:200]
        credit.save(update_fields=["status", "invoice", "invoice_line", "applied_at", "held_reason"])
    if selection.held:
        invoice.terms = {
            **invoice.terms,
            "service_credits_held": [{"service_credit": c.pk, "reason": r} for c, r in selection.held],
        }
        invoice.save(update_fields=["terms"])


def release_service_credits(invoice: Invoice) -> int:
    """A voided invoice gives its SLA credits back: pending again, for the contract's next invoice."""
    return ServiceCredit.objects.filter(invoice=invoice).update(
        status=ServiceCredit.Status.PENDING,
        invoice=None,
        invoice_line=None,
        applied_at=None,
        held_reason=f"released: invoice {invoice.number} was voided",
    )
