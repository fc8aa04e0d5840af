"""What the SLA gives billing, through billing's port (`billing.adjustments`), registered in SlaConfig.ready.

- Billing pauses: each `Exclusion` of kind `customer_dependency` on a contract whose term
  `pause_billing_on_customer_dependency` is on ("billing pauses for them, as the contract says");
  `scope=failed` pauses only the failed requests. Maintenance and contract-violation windows never do.
- Invoice credits: each pending `ServiceCredit` of a month before the invoice's (and those already on
  the open draft being re-rated), as one credit named after its SLA report; the credit records the
  invoice and line that applied it, the reason one was held, and is pending again when that invoice is
  voided.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Q
from django.db.models.functions import Coalesce

from billing.adjustments import BillingPause, InvoiceCredit
from billing.models import Invoice, InvoiceLine

from .models import Exclusion, ServiceCredit

__all__ = ["SlaBillingPauses", "SlaServiceCredits"]


class SlaBillingPauses:
    """Customer-dependency exclusions as billing pauses."""

    def pauses(
        self, owners: Mapping[str, str], start: datetime, end: datetime, as_of: datetime | None
    ) -> list[BillingPause]:
        windows = Exclusion.objects.filter(
            contract__code__in=list(owners),
            contract__pause_billing_on_customer_dependency=True,
            kind=Exclusion.Kind.CUSTOMER_DEPENDENCY,
            starts_at__lt=end,
            ends_at__gt=start,
        ).select_related("contract", "contract__tenant")
        if as_of is not None:
            windows = windows.filter(declared_at__lte=as_of)
        return [
            BillingPause(
                reference=window.pk,
                contract=window.contract.code,
                starts_at=window.starts_at,
                ends_at=window.ends_at,
                failed_only=window.scope == Exclusion.Scope.FAILED,
                reason=window.reason,
            )
            for window in windows.order_by("starts_at", "id")
            if owners[window.contract.code] == window.contract.tenant.code
        ]


class SlaServiceCredits:
    """Pending service credits as invoice credits."""

    def pending(
        self, contract_id: int, invoice: Invoice | None, period_start: datetime
    ) -> list[InvoiceCredit]:
        credits = (
            ServiceCredit.objects.select_for_update(of=("self",))
            .filter(_due(invoice_ids=[] if invoice is None else [invoice.pk]), contract_id=contract_id)
            .filter(month__lt=f"{period_start:%Y-%m}")
            .select_related("report")
            .order_by("month", "pk")
        )
        return [invoice_credit(credit) for credit in credits]

    def contracts_with_pending(
        self, contract_ids: Sequence[int], invoice_ids: Sequence[int], period_start: datetime
    ) -> set[int]:
        return set(
            ServiceCredit.objects.filter(
                _due(invoice_ids), contract_id__in=list(contract_ids), month__lt=f"{period_start:%Y-%m}"
            ).values_list("contract_id", flat=True)
        )

    def record(
        self,
        invoice: Invoice,
        applied: Sequence[tuple[InvoiceCredit, InvoiceLine]],
        held: Sequence[tuple[InvoiceCredit, str]],
        now: datetime,
    ) -> None:
        for credit, line in applied:
            ServiceCredit.objects.filter(pk=credit.reference).update(
                status=ServiceCredit.Status.APPLIED,
                invoice=invoice,
                invoice_line=line,
                applied_at=Coalesce("applied_at", now),
                held_reason="",
            )
        for credit, reason in held:
            ServiceCredit.objects.filter(pk=credit.reference).update(
                status=ServiceCredit.Status.PENDING,
                invoice=None,
                invoice_line=None,
                applied_at=None,
                held_reason=reason[:200],
            )

    def release(self, invoice: Invoice) -> int:
        return ServiceCredit.objects.filter(invoice=invoice).update(
            status=ServiceCredit.Status.PENDING,
            invoice=None,
            invoice_line=None,
            applied_at=None,
            held_reason=f"released: invoice {invoice.number} was voided",
        )


def _due(invoice_ids: Sequence[int]) -> Q:
    """Pending, or on one of these (open) invoices, which a re-rate puts on again."""
    due = Q(status=ServiceCredit.Status.PENDING)
    if invoice_ids:
        due |= Q(invoice_id__in=list(invoice_ids))
    return due


def invoice_credit(credit: ServiceCredit) -> InvoiceCredit:
    """The credit as billing carries it, named after the report: objective, measured value, target,
    ladder step."""
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
    return InvoiceCredit(
        reference=credit.pk,
        amount=credit.amount,
        currency=credit.currency,
        description=f"SLA service credit {percent} % for {credit.month}{why}, SLA report #{report.pk}",
        details={
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
