"""Outcome-based fees: declared outcomes, their verification window, and what gets billed.

Declared in a record (its `outcome` object: type, value, ref) or through `declare_outcome`. Pending
until the contract's window (e.g. 72 h) closes; meanwhile the customer can confirm or revoke it, and
the contract's rule (pricing.expressions, rule fields) confirms it at once when it holds. When the
window closes it is confirmed or revoked as the contract says. Confirmed outcomes are billed on the
invoice of the period they were confirmed in; a revocation after billing issues a credit note.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

from django.db import transaction
from django.db.models import F

from clickhouse_store.queries.billing import outcome_records, superseded_attempts
from common.money import round_money
from contracts.models import Contract
from pricing.errors import BillingError, InvalidRequest
from pricing.expressions import parse_metric
from treemeter_records.timeutil import assume_utc

from . import settlement
from .models import Invoice, InvoiceLine, Note, Outcome
from .terms import Terms

ZERO = Decimal(0)


def sync_record_outcomes(contract: Contract, start: datetime, end: datetime) -> int:
    """Declare the outcomes records of [start, end) carry, but not a retry's superseded attempts (refs
    already known are kept as they are), the contract's rule confirming at declaration those it holds
    for. Returns how many outcome records the period holds."""
    rule = parse_metric(contract.outcome_rule, rule=True) if contract.outcome_rule else None
    rows = outcome_records(contract.tenant.code, contract.code, start, end, rule)
    superseded = {  # a retry's superseded attempt is never billed, nor is its outcome
        a.record_id
        for a in superseded_attempts([contract.code], start, end)
        if a.tenant == contract.tenant.code
    }
    window = timedelta(hours=contract.outcome_window_hours)
    new = [
        Outcome(
            contract=contract,
            ref=ref or str(record_id),
            kind=kind,
            value=_value(value),
            record_id=record_id,
            declared_at=declared,
            window_ends_at=declared + window,
            **_rule_decision(bool(holds), declared),
        )
        for record_id, ref, kind, value, start_time, holds in rows
        if str(record_id) not in superseded
        for declared in [assume_utc(start_time)]
    ]
    Outcome.objects.bulk_create(new, ignore_conflicts=True)
    return len(new)


def _rule_decision(holds: bool, declared: datetime) -> dict[str, object]:
    if not holds:
        return {}
    return {"status": Outcome.Status.CONFIRMED, "decided_by": Outcome.Decider.RULE, "decided_at": declared}


def _value(text: str) -> Decimal:
    try:
        value = Decimal(text or "0")
    except InvalidOperation:
        return ZERO
    return value if value.is_finite() and value >= 0 else ZERO


def declare_outcome(
    contract: Contract, ref: str, kind: str, value: Decimal, declared_at: datetime
) -> Outcome:
    """Declare an outcome through the API; the same ref again returns the first declaration."""
    if value < 0:
        raise InvalidRequest("negative_price", f"An outcome's value must not be negative ({value}).")
    outcome, _ = Outcome.objects.get_or_create(
        contract=contract,
        ref=ref,
        defaults={
            "kind": kind,
            "value": value,
            "declared_at": declared_at,
            "window_ends_at": declared_at + timedelta(hours=contract.outcome_window_hours),
        },
    )
    return outcome


def decide_outcome(outcome: Outcome, confirm: bool, now: datetime, reason: str = "") -> Outcome:
    """The customer confirms or revokes. Inside the window only; revoking a billed outcome issues a
    credit note for what it was billed. Repeating the same decision is a no-op."""
    with transaction.atomic():
        outcome = (
            Outcome.objects.select_for_update(of=("self",))
            .select_related("billed_on__invoice")
            .get(pk=outcome.pk)
        )
        wanted = Outcome.Status.CONFIRMED if confirm else Outcome.Status.REVOKED
        if outcome.status == wanted:
            return outcome
        if now >= outcome.window_ends_at:
            raise BillingError(
                "window_closed", f"The verification window closed at {outcome.window_ends_at}."
            )
        if outcome.status == Outcome.Status.REVOKED:
            raise BillingError("outcome_revoked", "A revoked outcome cannot be confirmed.")
        outcome.status, outcome.decided_by, outcome.decided_at = wanted, Outcome.Decider.CUSTOMER, now
        outcome.reason = reason[:200]
        if not confirm and outcome.billed_on is not None:
            outcome.credit_note = _credit_billed(outcome, reason)
        outcome.save()
        return outcome


def _credit_billed(outcome: Outcome, reason: str) -> Note:
    """A credit note for one billed outcome: its share of the line, priced by the invoice's own terms."""
    line = outcome.billed_on
    assert line is not None
    invoice = line.invoice
    charge = next(c for c in Terms.from_json(invoice.terms).charges if c.dimension == line.dimension)
    amount = round_money(charge.model().charge(Decimal(1), outcome.value).amount, invoice.currency)
    amount = min(amount, line.amount)
    return settlement.issue_note(
        invoice, "credit", amount, f"Outcome {outcome.ref} revoked: {reason}"[:200], line=line
    )


def expire_outcomes(now: datetime, contracts: Iterable[Contract] | None = None) -> int:
    """Close the windows that have ended: confirm or revoke each as its contract says, decided at the
    moment its window closed (so it is billed in the period that happened in)."""
    pending = Outcome.objects.filter(status=Outcome.Status.PENDING, window_ends_at__lte=now)
    if contracts is not None:
        pending = pending.filter(contract__in=list(contracts))
    done = 0
    for on_expiry in ("confirm", "revoke"):
        status = Outcome.Status.CONFIRMED if on_expiry == "confirm" else Outcome.Status.REVOKED
        done += pending.filter(contract__outcome_on_expiry=on_expiry).update(
            status=status, decided_by=Outcome.Decider.EXPIRY, decided_at=F("window_ends_at")
        )
    return done


def billable_outcomes(contract: Contract, period_end: datetime) -> tuple[Decimal, Decimal, list[str]]:
    """Confirmed, not yet billed outcomes decided before the period ended: (count, value sum, refs)."""
    rows = list(
        Outcome.objects.filter(
            contract=contract,
            status=Outcome.Status.CONFIRMED,
            billed_on__isnull=True,
            decided_at__lt=period_end,
        ).values_list("ref", "value")
    )
    return Decimal(len(rows)), sum((v for _, v in rows), ZERO), [ref for ref, _ in rows]


def mark_billed(invoice: Invoice) -> None:
    """At finalisation: the outcomes the invoice's outcome line counted point at that line."""
    line = InvoiceLine.objects.filter(
        invoice=invoice, kind=InvoiceLine.Kind.USAGE, dimension="outcomes"
    ).first()
    if line is None:
        return
    Outcome.objects.filter(contract=invoice.contract, ref__in=line.details.get("outcomes", [])).update(
        billed_on=line
    )
