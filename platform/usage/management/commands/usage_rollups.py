"""Compare the dashboard rollups with the raw usage records over UTC days, and optionally rebuild them.

manage.py usage_rollups 2026-11-01 2026-12-01            # list (tenant, contract, day) differences
manage.py usage_rollups 2026-11-01 2026-12-01 --rebuild  # recompute the days that differ
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from usage.selectors import rollup_differences
from usage.services import rebuild_rollups


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise CommandError(f"{text!r} is not a date (YYYY-MM-DD)") from None


class Command(BaseCommand):
    help = "Compare the usage rollups with the raw records over [start, end) UTC days; --rebuild fixes them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("start", type=_day)
        parser.add_argument("end", type=_day)
        parser.add_argument("--rebuild", action="store_true", help="recompute the days that differ")

    def handle(self, *args: Any, start: date, end: date, rebuild: bool, **options: Any) -> None:
        if start >= end:
            raise CommandError("end must be after start")
        differences = rollup_differences(start, end)
        for row in differences:
            self.stdout.write(
                f"{row['day']} {row['tenant']} {row['contract']}: rollup {row['rollup']} raw {row['raw']}"
            )
        if not differences:
            self.stdout.write("The rollups agree with the raw records.")
            return
        if rebuild:
            for day in sorted({row["day"] for row in differences}):
                rebuild_rollups(day, day + timedelta(days=1))
            left = rollup_differences(start, end)
            self.stdout.write(
                f"Rebuilt {len({row['day'] for row in differences})} day(s); {len(left)} difference(s) left."
            )
