"""Translated names for the codes other apps store (statuses, line kinds; the dimensions' are in
pricing.dimensions): their model choices carry English labels only, and the portal speaks zh-Hans and
en."""

from __future__ import annotations

from collections.abc import Mapping

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

# A package's business unit (catalog.ComputePackage.unit): the common ones have a Chinese name.
UNITS: dict[str, Promise] = {
    "request": _("request"),
    "document": _("document"),
    "contract": _("contract"),
    "page": _("page"),
    "report": _("report"),
    "prediction": _("prediction"),
}

# The serving tree's layers as SLA objectives and percentiles name them.
LAYERS: dict[str, str | Promise] = {
    "l1": "L1",
    "l2": "L2",
    "l3": "L3",
    "queue": _("Queue wait"),
    "e2e": _("End to end"),
}

STATUSES: dict[str, Promise] = {
    "pending_payment": _("Waiting for payment"),
    "active": _("Active"),
    "ended": _("Ended"),
    "draft": _("Draft"),
    "grace": _("Grace period"),
    "finalized": _("Finalized"),
    "paid": _("Paid"),
    "void": _("Void"),
    "open": _("Open"),
    "rejected": _("Rejected"),
    "accepted": _("Accepted"),
    "excluded": _("Records excluded"),
    "pending": _("Pending"),
    "succeeded": _("Succeeded"),
    "failed": _("Failed"),
    "revoked": _("Revoked"),
    "final": _("Final"),
    "provisional": _("Provisional"),
    "applied": _("Applied"),
    "ok": _("Served"),
    "error": _("Failed (platform)"),
    "due": _("Awaiting payment"),
    "overdue": _("Overdue"),
    "settled": _("Settled by credits"),
    "held": _("Held: its gate failed"),
    "passed": _("Passed"),
}

# How a gray-release stage is promoted (releases.ReleaseStage.Promotion).
PROMOTIONS: dict[str, Promise] = {
    "manual": _("Manual: you or our staff promote it"),
    "automatic": _("Automatic, once the gate holds"),
}

LINE_KINDS: dict[str, Promise] = {
    "usage": _("Usage"),
    "base_fee": _("Base fee"),
    "commitment": _("Minimum commitment true-up"),
    "adjustment": _("Late usage adjustment"),
    "discount": _("Discount"),
    "service_credit": _("SLA service credit"),
    "credit": _("Credit note"),
    "debit": _("Debit note"),
}

CHARGE_MODELS: dict[str, Promise] = {
    "per_unit": _("Per unit"),
    "graduated": _("Graduated tiers"),
    "volume": _("Volume tiers"),
    "package": _("Per block"),
    "percentage": _("Percentage of value"),
}

PAYMENTS: dict[str, Promise] = {
    "checkout": _("Card payment (Stripe Checkout)"),
    "invoice": _("Pay by invoice"),
}

ROLES: dict[str, Promise] = {
    "owner": _("Owner"),
    "billing": _("Billing"),
    "developer": _("Developer"),
    "read_only": _("Read-only"),
}

RECEIPT_STATUSES: dict[str, Promise] = {  # ledger.receipts
    "included": _("In the log, in a signed checkpoint"),
    "logged": _("In the log, not yet checkpointed"),
    "pending": _("Not in the log yet (grace period runs)"),
    "missing": _("Missing from the log"),
    "mismatch": _("Logged with another leaf hash"),
}

DISPUTE_ACTIONS: dict[str, Promise] = {
    "opened": _("Opened"),
    "evidence_attached": _("Evidence attached"),
    "rejected": _("Rejected"),
    "accepted": _("Accepted"),
    "records_excluded": _("Records excluded"),
}


def label(table: Mapping[str, str | Promise], code: str) -> str:
    """The translated label, or the code itself for one this table does not know yet."""
    return str(table.get(code, code))
