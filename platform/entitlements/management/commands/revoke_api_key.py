from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from entitlements.services import EntitlementError, revoke_api_key


class Command(BaseCommand):
    help = "Revoke a customer API key by its prefix."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("prefix")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            api_key = revoke_api_key(options["prefix"])
        except EntitlementError as error:
            raise CommandError(f"{error.code}: {error.message}") from None
        self.stdout.write(
            f"revoked {api_key.prefix} at {api_key.revoked_at.isoformat() if api_key.revoked_at else ''}"
        )
