from argparse import ArgumentParser
from typing import Any, TextIO, cast

from django.core.management.base import BaseCommand, CommandError
from rich.console import Console

from billing.models import Invoice
from billing.presentation import invoice_table
from billing.selectors import invoice_with_lines
from common.periods import month_bounds


class Command(BaseCommand):
    help = "Print an invoice with its lines: by id, or by --contract and --month."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("invoice_id", nargs="?", type=int)
        parser.add_argument("--contract")
        parser.add_argument("--month", help="YYYY-MM")

    def handle(self, *args: Any, **options: Any) -> None:
        invoice_id = options["invoice_id"]
        if invoice_id is None:
            if not (options["contract"] and options["month"]):
                raise CommandError("Give an invoice id, or --contract and --month.")
            try:
                start, end = month_bounds(options["month"])
            except ValueError as error:
                raise CommandError(str(error)) from None
            found = (
                Invoice.objects.filter(contract__code=options["contract"], period_start=start, period_end=end)
                .values_list("pk", flat=True)
                .first()
            )
            if found is None:
                raise CommandError(f"No invoice for contract {options['contract']} in {options['month']}.")
            invoice_id = found
        try:
            invoice = invoice_with_lines(invoice_id)
        except Invoice.DoesNotExist:
            raise CommandError(f"No invoice {invoice_id}.") from None
        Console(file=cast(TextIO, self.stdout), width=110).print(invoice_table(invoice))
