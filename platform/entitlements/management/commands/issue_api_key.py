from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from entitlements.services import EntitlementError, issue_api_key


class Command(BaseCommand):
    help = "Issue a customer inference API key for a contract; the key is printed once and never stored."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("contract")
        parser.add_argument("--sla-class", default="standard")
        parser.add_argument("--quota-tokens", type=int, default=None, help="Tokens per month; default none.")
        parser.add_argument("--name", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            issued = issue_api_key(
                contract_code=options["contract"],
                sla_class=options["sla_class"],
                quota_tokens=options["quota_tokens"],
                name=options["name"],
            )
        except EntitlementError as error:
            raise CommandError(f"{error.code}: {error.message}") from None
        self.stdout.write(issued.secret)
