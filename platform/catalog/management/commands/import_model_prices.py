from argparse import ArgumentParser
from datetime import date
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from catalog.litellm import load_prices
from catalog.services import import_model_prices
from pricing.errors import BillingError


class Command(BaseCommand):
    help = (
        "Import a LiteLLM model_prices_and_context_window.json into the LLM price catalogue: one version "
        "per model, in force from a UTC day. A re-run of the same file stores nothing twice."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--currency", required=True, help="ISO 4217 code of the file's prices.")
        parser.add_argument("--effective-from", required=True, type=date.fromisoformat, help="YYYY-MM-DD")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            text = options["file"].read_bytes()
        except OSError as error:
            raise CommandError(f"cannot read {options['file']}: {error.strerror}") from None
        try:
            result = import_model_prices(load_prices(text), options["currency"], options["effective_from"])
        except BillingError as error:
            refusals = (error.details or {}).get("refusals", [])
            listed = "".join(f"\n  {r['message']}" for r in refusals)
            raise CommandError(f"{error.code}: {error.message}{listed}") from None
        self.stdout.write(
            f"{len(result.created)} stored, {len(result.unchanged)} already there, "
            f"{len(result.skipped)} skipped (no token price)"
        )
