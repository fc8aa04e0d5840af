from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from billing.services import BillingError
from billing.tasks import generate_invoice_task
from contracts.models import Contract


class Command(BaseCommand):
    help = "Invoice a contract for a closed month (runs the Celery task; in-process without a broker)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("contract")
        parser.add_argument("month", help="YYYY-MM")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            invoice_id = generate_invoice_task.delay(options["contract"], options["month"]).get()
        except (BillingError, ValueError, Contract.DoesNotExist) as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"invoice {invoice_id}")
