"""Invoice runs as Celery tasks: idempotent (one invoice per contract and period, made under a lock on
the contract row) and safe to run concurrently; the run reports progress through the task state."""

from __future__ import annotations

from typing import Any

import stripe
from celery import shared_task
from django.db.models import Q

from contracts.models import Contract

from .errors import BillingError, TermsError
from .models import Invoice, StripePayment
from .payments import push_invoice
from .periods import month_bounds
from .selectors import ContractMeter, usage_by_contract
from .services import generate_invoice


@shared_task(name="billing.generate_invoice")
def generate_invoice_task(contract_code: str, month: str) -> int:
    """Invoice one contract for one closed calendar month (UTC). Returns the invoice id; safe to retry."""
    start, end = month_bounds(month)
    contract = Contract.objects.get(code=contract_code)
    return generate_invoice(contract.pk, start, end).pk


def run_invoices(month: str, progress: Any = None) -> dict[str, Any]:
    """Invoice every contract that ran during `month`: one ClickHouse aggregate for all of them, then
    one invoice each. A contract whose terms cannot be billed is reported under `failed` (code and
    message) and the run goes on. `progress(done, total)` is called after each contract."""
    start, end = month_bounds(month)
    contracts = list(
        Contract.objects.billable()
        .filter(starts_at__lt=end)
        .filter(Q(ends_at__isnull=True) | Q(ends_at__gt=start))
        .select_related("tenant")
        .prefetch_related("metrics")
    )
    meters = [
        ContractMeter(c.tenant.code, c.code, {m.code: m.expression for m in c.metrics.all()})
        for c in contracts
    ]
    try:
        usage = usage_by_contract(meters, start, end)
    except TermsError:  # a contract's metric does not compile: measure each alone to isolate it
        usage = {}
    finalized, failed = 0, {}
    for done, contract in enumerate(contracts, start=1):
        try:
            invoice = generate_invoice(contract.pk, start, end, usage=usage.get(contract.code))
            finalized += invoice.number is not None
        except BillingError as error:
            failed[contract.code] = f"{error.code}: {error.message}"
        if progress is not None:
            progress(done, len(contracts))
    return {"contracts": len(contracts), "finalized": finalized, "failed": failed}


@shared_task(name="billing.run_invoices", bind=True)
def run_invoices_task(self: Any, month: str) -> dict[str, Any]:
    """All contracts' invoices for a closed month; the task state shows {done, total} while it runs."""

    def report(done: int, total: int) -> None:
        if self.request.id:
            self.update_state(state="PROGRESS", meta={"done": done, "total": total})

    return run_invoices(month, report)


@shared_task(
    name="billing.push_invoice_to_stripe",
    bind=True,
    autoretry_for=(stripe.APIConnectionError, stripe.RateLimitError, stripe.APIError),
    retry_backoff=2,
    retry_backoff_max=600,
    retry_jitter=False,
    max_retries=8,
)
def push_invoice_task(self: Any, invoice_id: int) -> str:
    """Push a finalised invoice to Stripe; transient errors retry after 2, 4, 8 … s (at most 10 min), each
    attempt and error recorded on its StripePayment. Returns the PaymentIntent id."""
    invoice = Invoice.objects.get(pk=invoice_id)
    try:
        return push_invoice(invoice).payment_intent_id
    except stripe.StripeError:
        if self.request.retries >= self.max_retries:
            StripePayment.objects.filter(invoice=invoice).update(status=StripePayment.Status.ERROR)
        raise
