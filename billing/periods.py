"""Billing periods: calendar months in UTC."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


def month_bounds(month: str) -> tuple[datetime, datetime]:
    """'2026-11' → (2026-11-01T00:00Z, 2026-12-01T00:00Z); the end is exclusive."""
    match = _MONTH.match(month)
    if not match or not 1 <= int(match.group(2)) <= 12:
        raise ValueError(f"{month!r} is not a month: use YYYY-MM, e.g. 2026-11.")
    year, number = int(match.group(1)), int(match.group(2))
    start = datetime(year, number, 1, tzinfo=UTC)
    end = datetime(year + number // 12, number % 12 + 1, 1, tzinfo=UTC)
    return start, end


def previous_month(now: datetime) -> str:
    year, month = (now.year, now.month - 1) if now.month > 1 else (now.year - 1, 12)
    return f"{year:04d}-{month:02d}"


def month_of(moment: datetime) -> str:
    return f"{moment.year:04d}-{moment.month:02d}"


def next_period_bounds(end: datetime) -> tuple[datetime, datetime]:
    """The calendar month starting at `end` (a period's exclusive end)."""
    return month_bounds(month_of(end))
