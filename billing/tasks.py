"""Invoice runs as Celery tasks: idempotent (one invoice per contract and period, made under a lock on
the contract row) and safe to run concurrently; the run reports progress through the task state.
Pushes to Stripe (invoices, credit and debit notes) retry transient errors with backoff."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import stripe
from celery import shared_task
from django.db.models import Q
from django.utils import timezone

from common.periods import month_bounds
from contracts.models import Contract, ContractPrice
from ingest.outbox import store_pending
from pricing.errors import TermsError

from .invoice_run import invoice_contracts
from .models import Invoice, Note, StripeNote, StripePayment
from .payments import TRANSIENT, PushInFlight, cancel_intent, push_invoice, push_note, refund_received
from .selectors import ContractMeter, usage_by_contract
from .services import generate_invoice


@shared_task(name="billing.generate_invoice")
def generate_invoice_task(contract_code: str, month: str) -> int:
    """Invoice one contract for one closed calendar month (UTC). Returns the invoice id; safe to retry."""
    start, end = month_bounds(month)
    contract = Contract.objects.get(code=contract_code)
    return generate_invoice(contract.pk, start, end).pk


def run_invoices(month: str, progress: Any = None, *, now: datetime | None = None) -> dict[str, Any]:
    """Invoice every contract that ran during `month`: one ClickHouse aggregate for all of them (per
    price segment for a contract whose price changes within the month), then the invoices in chunks of
    contracts, one transaction each (`billing.invoice_run`: the invoices generate_invoice makes, in a
    few statements per chunk). A contract whose terms cannot be billed is reported under `failed` (code
    and message) and the run goes on. `progress(done, total)` is called for each contract once its
    chunk has committed."""
    start, end = month_bounds(month)
    store_pending()  # every committed record is in ClickHouse before the aggregate reads them
    contracts = list(
        Contract.objects.billable()
        .filter(starts_at__lt=end)
        .filter(Q(ends_at__isnull=True) | Q(ends_at__gt=start))
        .select_related("tenant")
        .prefetch_related("metrics")
        .order_by("pk")
    )
    instants = _change_instants(start, end)
    meters = [
        ContractMeter(
            c.tenant.code,
            c.code,
            {m.code: m.expression for m in c.metrics.all()},
            instants.get(c.pk, ()),
            catalogue=c.price_by_catalogue,
        )
        for c in contracts
    ]
    try:
        usage = usage_by_contract(meters, start, end)
    except TermsError:  # a contract's metric does not compile: measure each alone to isolate it
        usage = {}
    finalized, failed = invoice_contracts(
        contracts, start, end, usage, now=now or timezone.now(), progress=progress
    )
    return {"contracts": len(contracts), "finalized": finalized, "failed": failed}


def _change_instants(start: datetime, end: datetime) -> dict[int, tuple[datetime, ...]]:
    """Per contract id, where a price version starts inside (start, end): the bounds generate_invoice
    rates with (`Terms.change_instants` of the period's terms). One read of the few such versions."""
    instants: dict[int, set[datetime]] = {}
    changes = ContractPrice.objects.filter(effective_from__gt=start, effective_from__lt=end).order_by()
    for contract_id, moment in changes.values_list("contract_id", "effective_from"):
        if moment is not None:  # always, by the filter
            instants.setdefault(contract_id, set()).add(moment)
    return {contract_id: tuple(sorted(moments)) for contract_id, moments in instants.items()}


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
    autoretry_for=TRANSIENT,
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


@shared_task(
    name="billing.push_note_to_stripe",
    bind=True,
    autoretry_for=(*TRANSIENT, PushInFlight),
    retry_backoff=2,
    retry_backoff_max=600,
    retry_jitter=False,
    max_retries=8,
)
def push_note_task(self: Any, note_id: int) -> str:
    """Send a credit or debit note to Stripe (billing.payments.push_note): transient errors, and an
    invoice push still in flight, retry after 2, 4, 8 … s; the last failure marks its StripeNote failed.
    Returns the Refund or PaymentIntent id ("" when nothing was sent)."""
    note = Note.objects.select_related("invoice").get(pk=note_id)
    try:
        return push_note(note).stripe_id
    except (stripe.StripeError, PushInFlight):
        if self.request.retries >= self.max_retries:
            StripeNote.objects.filter(note=note).update(status=StripeNote.Status.FAILED)
        raise


@shared_task(
    name="billing.cancel_payment_intent",
    autoretry_for=TRANSIENT,
    retry_backoff=2,
    retry_backoff_max=600,
    retry_jitter=False,
    max_retries=8,
)
def cancel_intent_task(intent_id: str) -> None:
    """Cancel the PaymentIntent a Checkout payment superseded; transient errors retry with backoff."""
    cancel_intent(intent_id)


@shared_task(
    name="billing.refund_received",
    autoretry_for=TRANSIENT,
    retry_backoff=2,
    retry_backoff_max=600,
    retry_jitter=False,
    max_retries=8,
)
def refund_task(intent_id: str, cents: int, invoice_number: str, key: str) -> str:
    """Refund money received beyond an invoice's amount due (billing.payments.refund_received)."""
    return refund_received(intent_id, cents, invoice_number, key)
