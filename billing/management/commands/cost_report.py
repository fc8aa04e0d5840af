from argparse import ArgumentParser
from typing import Any, TextIO, cast

from django.core.management.base import BaseCommand, CommandError
from rich.console import Console
from rich.table import Table

from billing.costs import GROUPS, cost_report
from common.periods import month_bounds


class Command(BaseCommand):
    help = "Cost, cost per request, revenue and gross margin for a month, per contract, package or tenant."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("month", help="YYYY-MM")
        parser.add_argument("--by", choices=sorted(GROUPS), default="contract")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            start, end = month_bounds(options["month"])
        except ValueError as error:
            raise CommandError(str(error)) from None
        table = Table(title=f"Costs and margin {options['month']} by {options['by']}")
        for column in (
            options["by"],
            "requests",
            "cost",
            "of which borrowed, idle",
            "cost/request",
            "revenue",
            "gross margin",
            "unpriced",
        ):
            table.add_column(column, justify="left" if column == options["by"] else "right")
        for row in cost_report(start, end, options["by"]):
            table.add_row(
                row.key,
                f"{row.requests:,}",
                f"{row.cost:,.2f}",
                f"{row.loan_cost:,.2f}",
                "–" if row.cost_per_request is None else f"{row.cost_per_request:f}",
                f"{row.revenue:,.2f}",
                "–" if row.gross_margin is None else f"{row.gross_margin * 100:.2f} %",
                f"{row.unpriced_requests:,}",
            )
        Console(file=cast(TextIO, self.stdout), width=120).print(table)
