"""The package lifecycle report's SQL (finance.lifecycle maps the rows): per package and calendar month
or quarter, the calls it answered and the customers who made them."""

from __future__ import annotations

from datetime import date, datetime
from typing import NamedTuple

from .. import query

# Period → the start of its bucket, over the records' start time (UTC).
BUCKETS: dict[str, str] = {"month": "toStartOfMonth(start_time)", "quarter": "toStartOfQuarter(start_time)"}


class PackageCalls(NamedTuple):
    """One package's records in one bucket, every status counted, and the tenants they belong to."""

    package: str
    bucket: date
    calls: int
    customers: int


def package_calls(period: str, start: datetime, end: datetime) -> list[PackageCalls]:
    """Per package and bucket of ``period`` (month or quarter): its records that started in [start, end)."""
    sql = (
        f"SELECT package, {BUCKETS[period]} AS bucket, count(), uniqExact(tenant) "  # noqa: S608
        f"FROM {query.RECORDS} "
        "WHERE start_time >= {start:DateTime64(9, 'UTC')} AND start_time < {end:DateTime64(9, 'UTC')} "
        "GROUP BY package, bucket ORDER BY package, bucket"
    )
    rows = query.select(sql, {"start": start, "end": end})
    return [PackageCalls(str(p), b, int(n), int(c)) for p, b, n, c in rows]
