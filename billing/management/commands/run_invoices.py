from argparse import ArgumentParser
from typing import Any, TextIO, cast

from django.core.management.base import BaseCommand, CommandError
from rich.console import Console
from rich.progress import Progress

from billing.tasks import run_invoices


class Command(BaseCommand):
    help = "Invoice every contract for a closed month, with progress; safe to re-run and to run concurrently."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("month", help="YYYY-MM")

    def handle(self, *args: Any, **options: Any) -> None:
        console = Console(file=cast(TextIO, self.stdout))
        try:
            with Progress(console=console, transient=True) as progress:
                task = progress.add_task("invoicing", total=None)
                result = run_invoices(
                    options["month"], lambda done, total: progress.update(task, completed=done, total=total)
                )
        except ValueError as error:
            raise CommandError(str(error)) from None
        console.print(f"{result['contracts']} contracts, {result['finalized']} invoices finalised")
        for code, reason in result["failed"].items():
            console.print(f"[red]{code}: {reason}[/]")
        if result["failed"]:
            raise CommandError(f"{len(result['failed'])} contracts could not be invoiced.")
