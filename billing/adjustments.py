"""What billing takes from outside when it rates an invoice: billing pauses and invoice credits.

Billing publishes this port; the layer above that owns such terms implements it and registers its
sources once, when its app is ready (sla does: customer-dependency exclusions are billing pauses, SLA
service credits are invoice credits; `sla.billing_sources`). Billing calls the registered sources and
keeps what is its own: which records a pause leaves out of rating (`billing.exclusions`; its SQL is in
`clickhouse_store.queries.billing`) and turning credits into lines
(`billing.service_credits`). With no source registered, an invoice has no pauses and no credits.

A pause source answers "which records of these contracts are not billed"; a credit source answers
"which credits does the contract's next invoice carry", locks them for the invoice run's transaction,
and learns which line applied each one (or why one was held), and when an invoice gives them back.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the models load after the app registry; the port is imported while it fills
    from .models import Invoice, InvoiceLine

__all__ = [
    "BillingPause",
    "CreditSource",
    "InvoiceCredit",
    "PauseSource",
    "Sources",
    "register_sources",
    "registered_sources",
    "sources_replaced",
]


@dataclass(frozen=True)
class BillingPause:
    """A window of one contract's records that is not billed: [starts_at, ends_at), every record or
    only the failed ones (`error`, `timeout`). `reference` and `reason` name it on the invoice."""

    reference: int
    contract: str  # the contract's code
    starts_at: datetime
    ends_at: datetime
    failed_only: bool
    reason: str


class PauseSource(Protocol):
    def pauses(
        self, owners: Mapping[str, str], start: datetime, end: datetime, as_of: datetime | None
    ) -> Sequence[BillingPause]:
        """The pauses of these contracts (code → tenant code; a contract under another tenant has
        none) overlapping [start, end), oldest first; with `as_of`, only those made by then."""
        ...


@dataclass(frozen=True)
class InvoiceCredit:
    """A credit the invoice carries as one negative line: `amount` in `currency`, described as the
    source says. `reference` identifies it to its source (and on the line: details.service_credit);
    `details` go on the line after it."""

    reference: int
    amount: Decimal
    currency: str
    description: str
    details: Mapping[str, Any] = field(default_factory=dict)


class CreditSource(Protocol):
    def pending(
        self, contract_id: int, invoice: Invoice | None, period_start: datetime
    ) -> list[InvoiceCredit]:
        """Locked until the transaction ends: the contract's credits due before the period (and those
        already on this open invoice, which a re-rate puts on again), oldest first."""
        ...

    def contracts_with_pending(
        self, contract_ids: Sequence[int], invoice_ids: Sequence[int], period_start: datetime
    ) -> set[int]:
        """Which of the contracts have a credit `pending` would return (one read for many)."""
        ...

    def record(
        self,
        invoice: Invoice,
        applied: Sequence[tuple[InvoiceCredit, InvoiceLine]],
        held: Sequence[tuple[InvoiceCredit, str]],
        now: datetime,
    ) -> None:
        """After the draft's lines are written: each applied credit is on its line; each held one is
        not on any invoice, for the reason given."""
        ...

    def release(self, invoice: Invoice) -> int:
        """The invoice was voided: its credits are due again (for the next invoice). How many."""
        ...


@dataclass(frozen=True)
class Sources:
    pauses: PauseSource | None = None
    credits: CreditSource | None = None


_registered = Sources()


def register_sources(*, pauses: PauseSource | None = None, credits: CreditSource | None = None) -> None:
    """Register the pause and/or credit source (again: the new one replaces the old)."""
    global _registered  # the one registry, filled once at start-up
    _registered = Sources(
        pauses=pauses if pauses is not None else _registered.pauses,
        credits=credits if credits is not None else _registered.credits,
    )


def registered_sources() -> Sources:
    return _registered


@contextmanager
def sources_replaced(sources: Sources) -> Iterator[Sources]:
    """Billing with exactly these sources for the block (tests), the registered ones afterwards."""
    global _registered
    before, _registered = _registered, sources
    try:
        yield sources
    finally:
        _registered = before
