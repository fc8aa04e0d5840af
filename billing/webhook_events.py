"""The webhook events billing publishes, each built here from billing's own models and published with a
stable event id (publishing is idempotent on it; the transport is `webhooks.services`).

| type | event id |
|---|---|
| invoice.finalized, invoice.paid | `<type>:<invoice id>` |
| dispute.updated | `dispute.updated:<dispute id>:<action>` (opened, rejected, accepted, excluded) |
| quota.exhausted | `quota.exhausted:<contract>:<dimension>:<YYYY-MM>` |
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from contracts.models import Contract
from webhooks.models import WebhookEvent
from webhooks.services import Publication, publish_event, publish_events

from .models import Dispute, Invoice

QUANTITY = Decimal("0.000001")  # quantities as invoice lines store them


def publish_invoice_event(event_type: str, invoice: Invoice) -> WebhookEvent:
    """`invoice.finalized` or `invoice.paid`, to the invoice's tenant's endpoints."""
    return publish_event(event_type, invoice.tenant, _invoice_payload(invoice), f"{event_type}:{invoice.pk}")


def publish_invoice_events(event_type: str, invoices: Sequence[Invoice]) -> list[WebhookEvent]:
    """`publish_invoice_event` for many invoices at once (an invoice run's chunk); the new events."""
    return publish_events(
        [Publication(event_type, i.tenant, _invoice_payload(i), f"{event_type}:{i.pk}") for i in invoices]
    )


def _invoice_payload(invoice: Invoice) -> dict[str, Any]:
    return {
        "invoice": invoice.pk,
        "number": invoice.number,
        "contract": invoice.contract.code,
        "status": invoice.status,
        "period_start": invoice.period_start.isoformat(),
        "period_end": invoice.period_end.isoformat(),
        "currency": invoice.currency,
        "total": str(invoice.total),
        "credit_notes": f"{Decimal(invoice.credit_notes):.2f}",
        "amount_due": str(invoice.amount_due),
    }


def publish_dispute_updated(dispute: Dispute, action: str) -> WebhookEvent:
    """`dispute.updated` when a dispute is opened or resolved (`action` says which)."""
    payload = {
        "dispute": dispute.pk,
        "action": action,
        "status": dispute.status,
        "invoice": dispute.invoice_id,
        "line": dispute.line_id,
        "credited": f"{Decimal(dispute.credited):.2f}",
    }
    return publish_event("dispute.updated", dispute.tenant, payload, f"dispute.updated:{dispute.pk}:{action}")


def publish_quota_exhausted(
    contract: Contract, dimension: str, included: Decimal, used: Decimal, month: str
) -> WebhookEvent:
    """`quota.exhausted`: a contract used up a dimension's included quantity in `month` (once per month)."""
    payload = {
        "contract": contract.code,
        "dimension": dimension,
        "month": month,
        "included": str(included.quantize(QUANTITY)),
        "used": str(used.quantize(QUANTITY)),
    }
    return publish_event(
        "quota.exhausted", contract.tenant, payload, f"quota.exhausted:{contract.code}:{dimension}:{month}"
    )
