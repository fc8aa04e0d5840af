"""Periods: calendar months, as UTC instants, in UTC (billing) or a policy's time zone (SLA windows)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


def parse_month(month: str) -> tuple[int, int]:
    """'2026-11' → (2026, 11); ValueError with a usable message otherwise."""
    match = _MONTH.match(month)
    if not match or not 1 <= int(match.group(2)) <= 12:
        raise ValueError(f"{month!r} is not a month: use YYYY-MM, e.g. 2026-11.")
    return int(match.group(1)), int(match.group(2))


def month_bounds(month: str, time_zone: str = "UTC") -> tuple[datetime, datetime]:
    """The month from midnight on the 1st to midnight on the next 1st in `time_zone`, as UTC instants;
    the end is exclusive. '2026-11' → (2026-11-01T00:00Z, 2026-12-01T00:00Z)."""
    year, number = parse_month(month)
    zone = ZoneInfo(time_zone)
    start = datetime(year, number, 1, tzinfo=zone)
    end = datetime(year + number // 12, number % 12 + 1, 1, tzinfo=zone)
    return start.astimezone(UTC), end.astimezone(UTC)


def month_of(instant: datetime, time_zone: str = "UTC") -> str:
    """The month (YYYY-MM) an instant falls in, in `time_zone`."""
    local = instant.astimezone(ZoneInfo(time_zone))
    return f"{local.year:04d}-{local.month:02d}"


def previous_month(month: str) -> str:
    year, number = parse_month(month)
    return f"{year - 1:04d}-12" if number == 1 else f"{year:04d}-{number - 1:02d}"


def next_period_bounds(end: datetime) -> tuple[datetime, datetime]:
    """The calendar month (UTC) starting at `end` (a period's exclusive end)."""
    return month_bounds(month_of(end))
