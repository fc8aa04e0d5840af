"""Time helpers shared by agents and the platform: every time is UTC and timezone-aware."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def unix_nanos(instant: datetime) -> int:
    """Exact Unix nanoseconds of an aware datetime (no float rounding on the way)."""
    if instant.utcoffset() is None:
        raise ValueError(f"{instant!r} has no time zone")
    return (instant - EPOCH) // _MICROSECOND * 1000


def from_unix_nanos(nanos: int) -> datetime:
    """The aware UTC datetime of Unix nanoseconds, to the microsecond (exact: no float on the way)."""
    return EPOCH + timedelta(microseconds=nanos // 1000)


def assume_utc(instant: datetime) -> datetime:
    """A datetime the engine returned without a zone (ClickHouse DateTime64 columns hold UTC) as aware UTC;
    an aware one unchanged."""
    return instant if instant.tzinfo else instant.replace(tzinfo=UTC)
