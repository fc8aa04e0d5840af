from argparse import ArgumentParser
from datetime import date
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from catalog.litellm import render_prices
from catalog.selectors import listed_prices
from common.money import MINOR_UNITS


class Command(BaseCommand):
    help = "Write the LLM price catalogue's versions in force on a day as LiteLLM's price file."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--currency", required=True, help="ISO 4217 code.")
        parser.add_argument("--as-of", type=date.fromisoformat, help="YYYY-MM-DD (UTC); default today.")
        parser.add_argument("--output", type=Path, help="The file to write; default standard output.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["currency"] not in MINOR_UNITS:
            raise CommandError(f"unsupported currency {options['currency']!r}")
        as_of = options["as_of"] or timezone.now().date()
        text = render_prices(listed_prices(options["currency"], as_of))
        if options["output"] is None:
            self.stdout.write(text, ending="")
        else:
            options["output"].write_text(text, encoding="utf-8")
