"""Disputes of invoice lines: open one with its evidence, and resolve it (reject, accept as a credit
note, or exclude the records a customer's own dependency caused and credit what they were billed).

Retry semantics: a line has at most one open dispute, and a resolved dispute is never resolved again,
so its credit notes are issued once. The invoice itself is never edited.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from decimal import Decimal
from functools import cached_property
from typing import Any

from django.db import IntegrityError, transaction

from accounts.access import Principal, scoped
from ledger.receipts import ReceiptCheck, check_receipt
from ledger.selectors import LedgerLookupError
from pricing.errors import BillingError
from treemeter_records.timeutil import from_unix_nanos, unix_nanos

from .evidence import Window, billed_usage, dispute_evidence, matching_records
from .exports import period_ns
from .models import SETTLED_DISPUTES, BillingExclusion, Dispute, DisputeEvent, Invoice, InvoiceLine
from .rating import ZERO, PeriodUsage, SegmentUsage, rate_charge, rate_versions
from .settlement import issue_note
from .terms import Terms
from .webhook_events import publish_dispute_updated


def open_dispute(
    user: Any, line_id: int, reason: str, principal: Principal, receipt: ReceiptCheck | None = None
) -> Dispute:
    """A customer disputes one line of a finalised invoice; the evidence is attached at once.

    Retry: a line has at most one open dispute; opening it again answers 409 dispute_open. A line a
    dispute settled (accepted, or its records excluded) is not disputed again: 409 line_settled. A rejected
    dispute leaves the line open to a new one.
    """
    lines = InvoiceLine.objects.select_related("invoice", "invoice__tenant").filter(pk=line_id)
    line = scoped(lines, principal, "invoice__tenant").first()
    if line is None:
        raise LedgerLookupError(404, "unknown_line", f"No invoice line {line_id}.")
    if not reason.strip():
        raise LedgerLookupError(400, "invalid_request", "Say why the line is disputed.")
    invoice = line.invoice
    if invoice.status not in (Invoice.Status.FINALIZED, Invoice.Status.PAID):
        raise LedgerLookupError(409, "invoice_not_final", f"Invoice {invoice.pk} is {invoice.status}.")
    settled = line.disputes.filter(status__in=SETTLED_DISPUTES).first()
    if settled is not None:
        raise LedgerLookupError(
            409, "line_settled", f"Line {line_id} was settled by dispute {settled.pk} ({settled.status})."
        )
    evidence = dispute_evidence(invoice, line)
    if receipt is not None:
        evidence["receipt"] = receipt.as_json()
    try:
        with transaction.atomic():
            dispute = Dispute.objects.create(
                invoice=invoice, line=line, tenant=invoice.tenant, reason=reason, evidence=evidence
            )
    except IntegrityError:
        raise LedgerLookupError(409, "dispute_open", f"Line {line_id} already has an open dispute.") from None
    DisputeEvent.objects.bulk_create(
        [
            DisputeEvent(dispute=dispute, actor=user, action="opened", detail={"reason": reason}),
            DisputeEvent(
                dispute=dispute,
                action="evidence_attached",
                detail={"checkpoint_size": evidence["checkpoint"]["size"], "records": evidence["records"]},
            ),
        ]
    )
    publish_dispute_updated(dispute, "opened")
    return dispute


def open_receipt_dispute(user: Any, token: str, principal: Principal) -> Dispute:
    """One call: a receipt whose record is not in the log after the contract's grace (or is logged with
    another leaf hash) opens a dispute on the invoice of the record's month, the receipt and its check
    attached as evidence. The line disputed is the invoice's first without an open dispute (the dispute
    is about the whole invoice's completeness; a line has at most one open dispute).

    409 ``receipt_not_evidence`` while the record is logged as promised or its grace runs;
    409 ``no_final_invoice`` when the month has no finalised invoice yet. Retry: 409 ``dispute_open``
    while a dispute opened with this receipt is open (a rejected one leaves the receipt open to a new one)."""
    check = check_receipt(token, principal.tenant_code)
    claims = check.receipt.claims
    if not check.is_evidence:
        raise LedgerLookupError(
            409,
            "receipt_not_evidence",
            f"Record {claims['record_id']} is {check.status}"
            + (f" (grace ends {check.grace_ends.isoformat()})" if check.status == "pending" else "")
            + ": the receipt is not evidence of a missing record.",
        )
    instant = from_unix_nanos(claims["start_ns"])
    invoice = (
        Invoice.objects.filter(
            contract__code=claims["contract"],
            tenant__code=claims["tenant"],
            period_start__lte=instant,
            period_end__gt=instant,
            status__in=(Invoice.Status.FINALIZED, Invoice.Status.PAID),
        )
        .order_by("-pk")
        .first()
    )
    if invoice is None:
        raise LedgerLookupError(
            409, "no_final_invoice", f"Contract {claims['contract']} has no finalised invoice for that time."
        )
    opened = invoice.disputes.filter(
        status=Dispute.Status.OPEN, evidence__receipt__claims__record_id=claims["record_id"]
    ).first()
    if opened is not None:
        raise LedgerLookupError(409, "dispute_open", f"Dispute {opened.pk} on this receipt is open.")
    line = invoice.lines.exclude(disputes__status=Dispute.Status.OPEN).order_by("pk").first()
    if line is None:
        raise LedgerLookupError(
            409, "dispute_open", f"Every line of invoice {invoice.pk} has an open dispute."
        )
    what = "is not in the log" if check.status == "missing" else "is logged with another leaf hash"
    reason = (
        f"Receipt: record {claims['record_id']} (agent {claims['agent_id']}, seq {claims['seq']}) was "
        f"served and receipted, and {what} after the grace period."
    )
    return open_dispute(user, line.pk, reason, principal, receipt=check)


def line_left_to_credit(line: InvoiceLine) -> Decimal:
    """What an acceptance without an amount credits: the line's amount less its earlier credit notes."""
    return line.amount - sum((n.amount for n in line.notes.filter(kind="credit")), Decimal(0))


def resolve_dispute(
    user: Any,
    dispute_id: int,
    decision: str,
    comment: str,
    amount: Decimal | None = None,
    record_ids: list[str] | None = None,
    window: Window | None = None,
) -> Dispute:
    """Finance rejects (the evidence stands), accepts in full or in part (a billing credit note), or
    finds the customer's own dependency at fault (``customer_dependency``): the records named, or those
    of a window with a status, are excluded from billing and what they were billed is credited.

    Retry: a resolved dispute is never resolved again (409 already_resolved), so its notes are issued once.
    """
    if decision not in ("reject", "accept", "customer_dependency"):
        raise LedgerLookupError(400, "invalid_request", "decision is reject, accept or customer_dependency.")
    with transaction.atomic():
        dispute = (
            Dispute.objects.select_for_update()
            .select_related("line", "invoice")
            .filter(pk=dispute_id)
            .first()
        )
        if dispute is None:
            raise LedgerLookupError(404, "unknown_dispute", f"No dispute {dispute_id}.")
        if dispute.status != Dispute.Status.OPEN:
            raise LedgerLookupError(409, "already_resolved", f"Dispute {dispute_id} is {dispute.status}.")
        if decision == "reject":
            dispute.status = Dispute.Status.REJECTED
            dispute.save(update_fields=["status"])
            DisputeEvent.objects.create(
                dispute=dispute,
                actor=user,
                action="rejected",
                detail={"comment": comment, "evidence": "attached"},
            )
            publish_dispute_updated(dispute, "rejected")
            return dispute
        if decision == "customer_dependency":
            return _exclude_records(user, dispute, comment, record_ids, window)
        line = dispute.line
        credit = line_left_to_credit(line) if amount is None else amount
        try:
            note = issue_note(
                dispute.invoice, "credit", credit, f"Dispute {dispute.pk}: {comment}", line=line
            )
        except BillingError as error:
            raise LedgerLookupError(409, error.code, error.message) from None
        dispute.status, dispute.credited, dispute.credit_note = Dispute.Status.ACCEPTED, credit, note
        dispute.save(update_fields=["status", "credited", "credit_note"])
        DisputeEvent.objects.create(
            dispute=dispute,
            actor=user,
            action="accepted",
            detail={
                "comment": comment,
                "amount": str(credit),
                "partial": credit < line.amount,
                "credit_note": note.number,
            },
        )
        publish_dispute_updated(dispute, "accepted")
        return dispute


class _SegmentCredits:
    """What excluding records takes off the lines of a dimension whose price changed within the
    invoice's period. The dimension's versions are rated (`rate_versions`: quota and tiers run in time
    order, as on the invoice) on the usage per price segment the invoice billed, less earlier
    exclusions, with and without these records; each version's line gives back its difference. A
    period minimum or maximum caps the total given back at what the dimension's lines lose together."""

    def __init__(
        self, invoice: Invoice, terms: Terms, earlier: dict[str, int], excluded: dict[str, int]
    ) -> None:
        self.invoice, self.terms = invoice, terms
        self.earlier, self.excluded = earlier, excluded
        self.edges = [unix_nanos(b) for b in terms.change_instants(invoice.period_start, invoice.period_end)]
        self.credits: dict[str, dict[str, tuple[Decimal, Decimal]]] = {}

    @cached_property
    def kept(self) -> list[dict[str, Decimal]]:
        """Per segment, what the invoice billed less what earlier exclusions took off."""
        billed = [SegmentUsage.from_json(s).quantities for s in self.invoice.terms.get("segments", [])]
        return self._less(billed, self._by_segment(self.earlier))

    @cached_property
    def after(self) -> list[dict[str, Decimal]]:
        return self._less(self.kept, self._by_segment(self.excluded))

    def _by_segment(self, records: dict[str, int]) -> list[dict[str, Decimal]]:
        """The billed usage of these records (id → start_ns) per price segment."""
        groups: list[list[str]] = [[] for _ in range(len(self.edges) + 1)]
        for record_id, start_ns in records.items():
            groups[bisect_right(self.edges, start_ns)].append(record_id)
        tenant, contract = self.invoice.tenant.code, self.invoice.contract.code
        return [billed_usage(tenant, contract, ids) for ids in groups]

    @staticmethod
    def _less(usage: list[dict[str, Decimal]], minus: list[dict[str, Decimal]]) -> list[dict[str, Decimal]]:
        return [
            {d: q - taken.get(d, ZERO) for d, q in part.items()}
            for part, taken in zip(usage, minus, strict=True)
        ]

    def _usage(self, parts: list[dict[str, Decimal]]) -> PeriodUsage:
        edges = [
            self.invoice.period_start,
            *self.terms.change_instants(self.invoice.period_start, self.invoice.period_end),
            self.invoice.period_end,
        ]
        totals: dict[str, Decimal] = {}
        for part in parts:
            for d, q in part.items():
                totals[d] = totals.get(d, ZERO) + q
        segments = tuple(SegmentUsage(edges[k], edges[k + 1], part) for k, part in enumerate(parts))
        return PeriodUsage(0, totals, segments=segments)

    def _rate(self, dimension: str) -> dict[str, tuple[Decimal, Decimal]]:
        versions = self.terms.versions().get(dimension, [])
        if not versions or any(v.charge_model == "percentage" for v in versions):
            return {}
        start, end, currency = self.invoice.period_start, self.invoice.period_end, self.invoice.currency
        kept = rate_versions(versions, self._usage(self.kept), start, end, currency)
        after = rate_versions(versions, self._usage(self.after), start, end, currency)
        left = sum((x.amount for x in kept), ZERO) - sum((x.amount for x in after), ZERO)
        remaining = {x.details["segment_start"]: x for x in after if "segment_start" in x.details}
        credits = {}
        for line in kept:
            if "segment_start" not in line.details:
                continue
            rest = remaining[line.details["segment_start"]]
            amount = min(line.amount - rest.amount, max(left, ZERO))
            left -= amount
            credits[line.details["segment_start"]] = (line.quantity - rest.quantity, amount)
        return credits

    def credit(self, line: InvoiceLine) -> tuple[Decimal, Decimal]:
        """The excluded quantity in the line's segment, and what it was billed on this line."""
        if line.dimension not in self.credits:
            self.credits[line.dimension] = self._rate(line.dimension)
        return self.credits[line.dimension].get(line.details["segment_start"], (ZERO, ZERO))


def _exclude_records(
    user: Any, dispute: Dispute, comment: str, record_ids: list[str] | None, window: Window | None
) -> Dispute:
    """Exclude the invoice's matching records (not already excluded) and credit, per usage line, what
    they were billed: the line's charge rated on what earlier exclusions left, minus the same charge
    rated without these records too (quota and rounding stay exact). Runs in the caller's transaction,
    with the dispute row locked."""
    invoice = dispute.invoice
    tenant, contract = invoice.tenant.code, invoice.contract.code
    if (record_ids is None) == (window is None):
        raise LedgerLookupError(400, "invalid_request", "Name the records, or a window and a status.")
    found = matching_records(tenant, contract, period_ns(invoice), record_ids, window)
    unknown = sorted(set(record_ids or []) - set(found))
    if unknown:
        raise LedgerLookupError(
            404, "unknown_records", f"Not records of this invoice: {', '.join(unknown[:5])}."
        )
    already = {
        str(r)
        for r in BillingExclusion.objects.filter(record_id__in=list(found)).values_list(
            "record_id", flat=True
        )
    }
    excluded = sorted(set(found) - already)
    if not excluded:
        raise LedgerLookupError(
            409, "nothing_to_exclude", "No record to exclude that is not excluded already."
        )
    start_ns, end_ns = period_ns(invoice)
    earlier_starts = {
        str(record_id): start
        for record_id, start in BillingExclusion.objects.filter(
            tenant=tenant, contract=contract, start_ns__gte=start_ns, start_ns__lt=end_ns
        ).values_list("record_id", "start_ns")
    }
    before = billed_usage(tenant, contract, list(earlier_starts))  # what earlier exclusions took off
    try:
        BillingExclusion.objects.bulk_create(
            BillingExclusion(
                dispute=dispute, record_id=r, tenant=tenant, contract=contract, start_ns=found[r]
            )
            for r in excluded
        )
    except IntegrityError:  # another dispute excluded one of them meanwhile: nothing is kept, retry
        raise LedgerLookupError(
            409, "exclusion_conflict", "Another dispute excluded some of these records meanwhile; retry."
        ) from None
    terms = Terms.from_json(invoice.terms)
    by_version = {(c.dimension, c.effective_from): c for c in terms.charges}
    versions = terms.versions()
    usage = billed_usage(tenant, contract, excluded)
    segmented = _SegmentCredits(invoice, terms, earlier_starts, {r: found[r] for r in excluded})
    credits: list[dict[str, str]] = []
    for line in invoice.lines.filter(kind="usage").order_by("pk"):
        if "rated" in line.details:  # a period minimum/maximum line: nothing of it is per record
            continue
        if "segment_start" in line.details:  # one version of a dimension whose price changed
            quantity, billed_less = segmented.credit(line)  # quota freed earlier counts on later lines
        else:
            dimension_versions = versions.get(line.dimension, [])
            charge = by_version.get((line.dimension, line.details.get("effective_from", ""))) or (
                dimension_versions[0] if len(dimension_versions) == 1 else None
            )
            quantity = usage.get(line.dimension, ZERO)
            if charge is None or not quantity or charge.charge_model == "percentage":
                continue
            kept = line.quantity - before[line.dimension]
            billed = rate_charge(charge, kept, ZERO, invoice.currency).amount
            rest = rate_charge(charge, kept - quantity, ZERO, invoice.currency).amount
            billed_less = billed - rest
        left = line.amount - sum((n.amount for n in line.notes.filter(kind="credit")), ZERO)
        credit = min(billed_less, left)
        if credit <= 0:
            continue
        try:
            note = issue_note(invoice, "credit", credit, f"Dispute {dispute.pk}: excluded records", line=line)
        except BillingError as error:
            raise LedgerLookupError(409, error.code, error.message) from None
        credits.append(
            {
                "line": str(line.pk),
                "dimension": line.dimension,
                "quantity": str(quantity),
                "amount": str(credit),
                "credit_note": note.number,
            }
        )
    total = sum((Decimal(c["amount"]) for c in credits), ZERO)
    dispute.status, dispute.credited = Dispute.Status.EXCLUDED, total
    dispute.save(update_fields=["status", "credited"])
    DisputeEvent.objects.create(
        dispute=dispute,
        actor=user,
        action="records_excluded",
        detail={
            "comment": comment,
            "selection": {"records": record_ids}
            if window is None
            else {"start_ns": window.start_ns, "end_ns": window.end_ns, "status": window.status},
            "excluded": len(excluded),
            "already_excluded": len(already),
            "records_sha256": hashlib.sha256("\n".join(excluded).encode()).hexdigest(),
            "credits": credits,
            "total": str(total),
        },
    )
    publish_dispute_updated(dispute, "excluded")
    return dispute
