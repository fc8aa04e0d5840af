"""The finance reports as `Table`s: which columns each shows, in which order, with translated labels.
Pages and downloads both call these, so a download is always exactly the table on the page."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.utils.translation import pgettext_lazy

from pricing.dimensions import DIMENSION_NAMES

from . import lifecycle, selectors
from .reconciliation import ReconciliationFilter, reconciliation_rows
from .tables import Column, Table, money, quantity, ratio

CURRENCY = Column("currency", pgettext_lazy("finance", "Currency"))
INVOICE_STATUS = {
    "draft": pgettext_lazy("finance", "Draft"),
    "grace": pgettext_lazy("finance", "Grace period"),
    "finalized": pgettext_lazy("finance", "Finalised"),
    "paid": pgettext_lazy("finance", "Paid"),
    "void": pgettext_lazy("finance", "Void"),
}
DISPUTE_STATUS = {
    "open": pgettext_lazy("finance", "Open"),
    "rejected": pgettext_lazy("finance", "Rejected"),
    "accepted": pgettext_lazy("finance", "Accepted"),
    "excluded": pgettext_lazy("finance", "Records excluded"),
}
RECONCILIATION_RESULT = {
    "match": pgettext_lazy("finance", "Match"),
    "explained": pgettext_lazy("finance", "Explained"),
    "unexplained": pgettext_lazy("finance", "UNEXPLAINED"),
}
LATE_DECISION = {
    "adjusted": pgettext_lazy("finance", "Adjusted on a later invoice"),
    "ignored": pgettext_lazy("finance", "Ignored (too old)"),
    "pending": pgettext_lazy("finance", "Not yet assessed"),
}


def invoices(selected: selectors.InvoiceFilter) -> Table:
    columns = (
        Column("id", pgettext_lazy("finance", "ID"), "integer"),
        Column("number", pgettext_lazy("finance", "Number"), link="portal-invoice"),
        Column("tenant_code", pgettext_lazy("finance", "Tenant")),
        Column("contract_code", pgettext_lazy("finance", "Contract")),
        Column("package_code", pgettext_lazy("finance", "Package")),
        Column("month", pgettext_lazy("finance", "Month")),
        Column("period_start", pgettext_lazy("finance", "Period start"), "timestamp"),
        Column("period_end", pgettext_lazy("finance", "Period end"), "timestamp"),
        Column("status", pgettext_lazy("finance", "Status"), labels=INVOICE_STATUS),
        CURRENCY,
        money("subtotal", pgettext_lazy("finance", "Subtotal")),
        money("tax", pgettext_lazy("finance", "Tax")),
        money("total", pgettext_lazy("finance", "Total")),
        money("credits_applied", pgettext_lazy("finance", "Credits applied")),
        money("credit_notes", pgettext_lazy("finance", "Credit notes")),
        money("amount_due", pgettext_lazy("finance", "Amount due")),
        Column("finalized_at", pgettext_lazy("finance", "Finalised at"), "timestamp"),
        Column("paid_at", pgettext_lazy("finance", "Paid at"), "timestamp"),
    )
    return Table("finance-invoices", columns, selectors.invoice_rows(selected))


def invoice_totals(selected: selectors.InvoiceFilter) -> Table:
    columns = (
        CURRENCY,
        Column("invoices", pgettext_lazy("finance", "Invoices"), "integer"),
        money("subtotal", pgettext_lazy("finance", "Subtotal")),
        money("tax", pgettext_lazy("finance", "Tax")),
        money("total", pgettext_lazy("finance", "Total")),
        money("credits_applied", pgettext_lazy("finance", "Credits applied")),
        money("credit_notes", pgettext_lazy("finance", "Credit notes")),
        money("amount_due", pgettext_lazy("finance", "Amount due")),
    )
    return Table("finance-invoice-totals", columns, selectors.invoice_totals(selected))


GROUP_LABELS = {
    "month": pgettext_lazy("finance", "Month"),
    "package": pgettext_lazy("finance", "Package"),
    "tenant": pgettext_lazy("finance", "Tenant"),
}


def revenue(by: Sequence[str], start: datetime | None, end: datetime | None, currency: str) -> Table:
    columns = (
        *(Column(key, GROUP_LABELS[key]) for key in by),
        CURRENCY,
        Column("invoices", pgettext_lazy("finance", "Invoices"), "integer"),
        money("invoiced", pgettext_lazy("finance", "Invoiced (before tax)")),
        money("credit_notes", pgettext_lazy("finance", "Credit notes")),
        money("debit_notes", pgettext_lazy("finance", "Debit notes")),
        money("net_revenue", pgettext_lazy("finance", "Net revenue")),
    )
    return Table("finance-revenue", columns, selectors.revenue_rows(by, start, end, currency))


def costs(start: datetime, end: datetime, by: str) -> Table:
    columns = (
        Column(by, GROUP_LABELS[by]),
        CURRENCY,
        Column("requests", pgettext_lazy("finance", "Requests"), "integer"),
        Column("unpriced_requests", pgettext_lazy("finance", "Requests without a cost profile"), "integer"),
        money("cost", pgettext_lazy("finance", "Cost")),
        money("loan_cost", pgettext_lazy("finance", "Of which borrowed executors, held idle")),
        Column("cost_currency", pgettext_lazy("finance", "Cost currency")),
        quantity("cost_per_request", pgettext_lazy("finance", "Cost per request")),
        money("revenue", pgettext_lazy("finance", "Net revenue")),
        ratio("gross_margin", pgettext_lazy("finance", "Gross margin")),
    )
    return Table("finance-costs", columns, selectors.cost_rows(start, end, by))


SPLIT_PARTS = {
    "L1": pgettext_lazy("finance", "L1 routing"),
    "L2": pgettext_lazy("finance", "L2 expert cache"),
    "L3": pgettext_lazy("finance", "L3 experts"),
    "unattributed": pgettext_lazy("finance", "Requests without experts (their L2 and L3)"),
    "total": pgettext_lazy("finance", "Total"),
}
SPLIT_LABELS = {"layer": pgettext_lazy("finance", "Layer"), "expert": pgettext_lazy("finance", "Expert")}


def cost_split(start: datetime, end: datetime, by: str) -> Table:
    columns = (
        Column("part", SPLIT_LABELS[by], labels=SPLIT_PARTS),
        Column("requests", pgettext_lazy("finance", "Requests"), "integer"),
        money("cost", pgettext_lazy("finance", "Cost")),
        CURRENCY,
    )
    return Table("finance-cost-split", columns, selectors.cost_split_rows(start, end, by))


def disputes(status: str, now: datetime) -> Table:
    columns = (
        Column("id", pgettext_lazy("finance", "Dispute"), "integer"),
        Column("status", pgettext_lazy("finance", "Status"), labels=DISPUTE_STATUS),
        Column("age_days", pgettext_lazy("finance", "Age (days)"), "integer"),
        Column("opened_at", pgettext_lazy("finance", "Opened at"), "timestamp"),
        Column("tenant_code", pgettext_lazy("finance", "Tenant")),
        Column("invoice_number", pgettext_lazy("finance", "Invoice")),
        Column("line_id", pgettext_lazy("finance", "Line"), "integer"),
        Column("line_dimension", pgettext_lazy("finance", "Dimension"), labels=DIMENSION_NAMES),
        Column("line_description", pgettext_lazy("finance", "Line description")),
        CURRENCY,
        money("line_amount", pgettext_lazy("finance", "Line amount")),
        money("credited", pgettext_lazy("finance", "Credited")),
        Column("credit_note", pgettext_lazy("finance", "Credit note")),
        Column("reason", pgettext_lazy("finance", "Reason")),
    )
    return Table("finance-disputes", columns, selectors.dispute_rows(status, now))


def reconciliation(selected: ReconciliationFilter) -> Table:
    columns = (
        Column("month", pgettext_lazy("finance", "Month")),
        Column("tenant_code", pgettext_lazy("finance", "Tenant")),
        Column("contract_code", pgettext_lazy("finance", "Contract")),
        Column("invoice_number", pgettext_lazy("finance", "Invoice")),
        Column("finalized_at", pgettext_lazy("finance", "Finalised at"), "timestamp"),
        Column("dimension", pgettext_lazy("finance", "Dimension"), labels=DIMENSION_NAMES),
        quantity("usage_total", pgettext_lazy("finance", "Usage in ClickHouse")),
        quantity("late", pgettext_lazy("finance", "Late records")),
        Column("late_decision", pgettext_lazy("finance", "Late decision"), labels=LATE_DECISION),
        Column("late_billed_on", pgettext_lazy("finance", "Late billed on")),
        quantity("excluded", pgettext_lazy("finance", "Excluded")),
        quantity("unexplained", pgettext_lazy("finance", "Unexplained")),
        quantity("invoiced", pgettext_lazy("finance", "Invoiced quantity")),
        quantity("disputed", pgettext_lazy("finance", "Disputed (credited)")),
        quantity("included_quota", pgettext_lazy("finance", "Included quota")),
        quantity("net_billable", pgettext_lazy("finance", "Net billable")),
        quantity("difference", pgettext_lazy("finance", "Difference")),
        CURRENCY,
        money("line_amount", pgettext_lazy("finance", "Line amount")),
        money("credited", pgettext_lazy("finance", "Credit notes")),
        money("net_amount", pgettext_lazy("finance", "Net amount")),
        Column("status", pgettext_lazy("finance", "Result"), labels=RECONCILIATION_RESULT),
    )
    return Table("finance-reconciliation", columns, reconciliation_rows(selected))


PERIOD_LABELS = {"quarter": pgettext_lazy("finance", "Quarter"), "month": pgettext_lazy("finance", "Month")}
BUCKET_STATE = {"closed": pgettext_lazy("finance", "Closed"), "open": pgettext_lazy("finance", "In progress")}
RETIREMENT = {lifecycle.RETIRE: pgettext_lazy("finance", "Flag for retirement")}


def package_lifecycle(period: str, first_month: str, last_month: str, now: datetime) -> Table:
    columns = (
        Column("package", pgettext_lazy("finance", "Package")),
        Column("period", PERIOD_LABELS[period]),
        Column("period_start", pgettext_lazy("finance", "Period start"), "timestamp"),
        Column("state", pgettext_lazy("finance", "State"), labels=BUCKET_STATE),
        Column("calls", pgettext_lazy("finance", "Calls"), "integer"),
        Column("active_customers", pgettext_lazy("finance", "Active customers"), "integer"),
        Column("contracts_ended", pgettext_lazy("finance", "Contracts ended"), "integer"),
        Column("contracts_renewed", pgettext_lazy("finance", "Renewed"), "integer"),
        ratio("renewal_rate", pgettext_lazy("finance", "Renewal rate")),
        CURRENCY,
        money("base_revenue", pgettext_lazy("finance", "Base fees")),
        money("outcome_revenue", pgettext_lazy("finance", "Outcome fees")),
        money("net_revenue", pgettext_lazy("finance", "Net revenue")),
        money("cost", pgettext_lazy("finance", "Cost")),
        Column("cost_currency", pgettext_lazy("finance", "Cost currency")),
        ratio("gross_margin", pgettext_lazy("finance", "Gross margin")),
        Column("retirement", pgettext_lazy("finance", "Retirement"), labels=RETIREMENT),
    )
    rows = lifecycle.lifecycle_rows(period, first_month, last_month, now)
    return Table("finance-packages", columns, rows)
