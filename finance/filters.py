"""Query-string filters of the finance pages, parsed once; bad input is a 400 with a stable code."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from django.http import QueryDict

from common.errors import ApiError
from common.money import MINOR_UNITS
from common.periods import month_bounds


class FilterError(ApiError):
    http_status = 400


def _value(query: QueryDict, name: str) -> str:
    return (query.get(name) or "").strip()


def only(query: QueryDict, names: Collection[str]) -> None:
    """Refuse a parameter the report does not read (a misspelt or another page's filter would otherwise
    be dropped without a word: ?month= where the report reads period)."""
    unknown = sorted(set(query) - set(names))
    if unknown:
        raise FilterError(
            "unknown_filter",
            f"This report has no filter {', '.join(unknown)}; it takes {', '.join(names)}.",
            {"field": unknown[0], "allowed": list(names)},
        )


def month(query: QueryDict, name: str) -> tuple[datetime, datetime] | None:
    """A YYYY-MM month as its [start, end) in UTC, or None when absent."""
    raw = _value(query, name)
    if not raw:
        return None
    try:
        return month_bounds(raw)
    except ValueError as error:
        raise FilterError("invalid_filter", str(error), {"field": name, "value": raw}) from None


def choice(query: QueryDict, name: str, allowed: Collection[str]) -> str:
    """One of `allowed`, or '' when absent."""
    raw = _value(query, name)
    if raw and raw not in allowed:
        raise FilterError(
            "invalid_filter",
            f"{name} must be one of {', '.join(sorted(allowed))}, not {raw!r}.",
            {"field": name, "value": raw},
        )
    return raw


def choices(query: QueryDict, name: str, allowed: Collection[str], default: list[str]) -> list[str]:
    """Several of `allowed` (repeated or comma-separated), in the order of `allowed`."""
    raw = [part.strip() for value in query.getlist(name) for part in value.split(",") if part.strip()]
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise FilterError(
            "invalid_filter",
            f"{name} takes {', '.join(allowed)}; unknown: {', '.join(unknown)}.",
            {"field": name, "value": unknown},
        )
    return [a for a in allowed if a in raw] or default


def currency(query: QueryDict, name: str = "currency") -> str:
    return choice(query, name, MINOR_UNITS)


def code(query: QueryDict, name: str) -> str:
    """A tenant or contract code; an unknown code simply matches nothing."""
    raw = _value(query, name)
    if len(raw) > 64:
        raise FilterError("invalid_filter", f"{name} is at most 64 characters.", {"field": name})
    return raw
