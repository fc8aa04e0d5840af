"""Close a contract's SLA month: the final report and, when earned, its service credit."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from common.periods import parse_month
from contracts.models import Contract
from sla.services import SlaError, close_period


class Command(BaseCommand):
    help = "sla_close <contract code> <YYYY-MM>: safe to rerun (one report, at most one credit)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("contract")
        parser.add_argument("month")

    def handle(self, *args: Any, **options: Any) -> None:
        contract = Contract.objects.select_related("tenant").filter(code=options["contract"]).first()
        if contract is None:
            raise CommandError(f"No contract {options['contract']!r}.")
        try:
            parse_month(options["month"])
            result = close_period(contract, options["month"])
        except ValueError as error:  # SlaError included
            code = f"{error.code}: " if isinstance(error, SlaError) else ""
            raise CommandError(f"{code}{error}") from error
        report = result.report
        self.stdout.write(
            f"SLA report #{report.pk} {contract.code} {report.month} ({report.status}): "
            f"{report.valid_count} valid requests, credit {report.credit_percent.normalize()} %"
        )
        for objective in report.objectives:
            self.stdout.write(
                f"  {objective['name']}: {objective['measured_percent'] or 'no traffic'} % "
                f"(target {objective['target_percent']} %)"
            )
        if result.credit is not None:
            self.stdout.write(f"Service credit: {result.credit.amount} {result.credit.currency}")
        elif result.waiting_for_invoice:
            self.stdout.write("Credit earned, waiting for the month's invoice (rerun after billing).")
