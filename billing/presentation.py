"""Render an invoice for a terminal."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from common.money import format_unit_price

from .models import Invoice


def invoice_table(invoice: Invoice) -> Group:
    title = Text(
        f"Invoice #{invoice.pk} {invoice.number or '(not numbered yet)'}  "
        f"{invoice.tenant.name} ({invoice.tenant.code})  "
        f"contract {invoice.contract.code}\n"
        f"Period {invoice.period_start:%Y-%m-%d} – {invoice.period_end:%Y-%m-%d} (UTC, end exclusive)  "
        f"{invoice.record_count} records  status {invoice.status}",
        style="bold",
    )
    table = Table(show_footer=True)
    table.add_column("Dimension", footer="Total")
    table.add_column("Quantity", justify="right")
    table.add_column("Unit price", justify="right")
    table.add_column(f"Amount ({invoice.currency})", justify="right", footer=f"{invoice.total:,.2f}")
    for line in invoice.lines.all():
        table.add_row(
            line.description,
            f"{line.quantity.normalize():,f}",
            format_unit_price(line.unit_price, invoice.currency),
            f"{line.amount:,.2f}",
        )
    if invoice.tax or invoice.credits_applied:
        table.add_section()
        table.add_row("Subtotal", "", "", f"{invoice.subtotal:,.2f}")
        table.add_row(
            "Tax" + (" (included)" if invoice.terms.get("tax_inclusive") else ""),
            "",
            "",
            f"{invoice.tax:,.2f}",
        )
        if invoice.credits_applied:
            table.add_row("Prepaid credits", "", "", f"-{invoice.credits_applied:,.2f}")
        if invoice.credit_notes:
            table.add_row("Credit notes", "", "", f"-{invoice.credit_notes:,.2f}")
        if invoice.credits_applied or invoice.credit_notes:
            table.add_row("Amount due", "", "", f"{invoice.amount_due:,.2f}")
    return Group(title, table)
