"""SLA windows: calendar months in the policy's time zone, as UTC instants."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

# Agents buffer and retry, so records arrive a little late: a month's report becomes final this long
# after the month ends (before that it stays provisional and is recomputed).
SETTLE = timedelta(hours=1)

_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


def parse_month(month: str) -> tuple[int, int]:
    """'2026-11' → (2026, 11); ValueError with a usable message otherwise."""
    match = _MONTH.match(month)
    if not match or not 1 <= int(match.group(2)) <= 12:
        raise ValueError(f"{month!r} is not a month: use YYYY-MM, e.g. 2026-11.")
    return int(match.group(1)), int(match.group(2))


def month_window(month: str, time_zone: str) -> tuple[datetime, datetime]:
    """The month from local midnight on the 1st to local midnight on the next 1st, in UTC; end exclusive."""
    year, number = parse_month(month)
    zone = ZoneInfo(time_zone)
    start = datetime(year, number, 1, tzinfo=zone)
    end = datetime(year + number // 12, number % 12 + 1, 1, tzinfo=zone)
    return start.astimezone(UTC), end.astimezone(UTC)


def month_of(instant: datetime, time_zone: str) -> str:
    """The local month (YYYY-MM) an instant falls in."""
    local = instant.astimezone(ZoneInfo(time_zone))
    return f"{local.year:04d}-{local.month:02d}"


def previous_month(month: str) -> str:
    year, number = parse_month(month)
    return f"{year - 1:04d}-12" if number == 1 else f"{year:04d}-{number - 1:02d}"
