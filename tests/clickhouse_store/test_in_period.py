"""`query.in_period`: a period's records, selected by partition when it is whole UTC months."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from django.test import override_settings

from clickhouse_store import query

NOV, DEC, JAN = (datetime(y, m, 1, tzinfo=UTC) for y, m in ((2026, 11), (2026, 12), (2027, 1)))


def _ns(moment: datetime) -> int:
    return int(moment.timestamp()) * 10**9


@pytest.mark.parametrize(
    ("start", "end", "months"),
    [
        (NOV, DEC, ["202611"]),
        (NOV, JAN, ["202611", "202612"]),  # across a year end
        (datetime(2026, 11, 1, 8, tzinfo=timezone(timedelta(hours=8))), DEC, ["202611"]),  # 00:00 UTC
        (NOV, DEC - timedelta(microseconds=1), []),
        (NOV + timedelta(hours=1), DEC, []),
        (datetime(2026, 11, 1, tzinfo=timezone(timedelta(hours=8))), DEC, []),  # 16:00 UTC the day before
        (DEC, NOV, []),
    ],
)
def test_partitions_only_for_whole_utc_months(start: datetime, end: datetime, months: list[str]) -> None:
    sql, params = query.in_period(start, end)
    if months:
        assert params == {"period_months": months} and "_partition_id" in sql
    else:
        assert params == {"period_start": start, "period_end": end} and "start_time >=" in sql


@pytest.mark.parametrize("cluster", ["", "tree"])
def test_both_forms_select_the_same_records(
    ch: None,
    make_record: Callable[..., dict[str, Any]],
    as_values: Callable[[dict[str, Any]], dict[str, Any]],
    cluster: str,
) -> None:
    edges = [_ns(NOV) - 1, _ns(NOV), _ns(DEC) - 1, _ns(DEC), _ns(JAN) - 1, _ns(JAN)]
    records = [as_values(make_record(start_ns=ns, end_ns=ns + 1000)) for ns in edges]
    query.insert_rows("usage_records", list(records[0]), [list(r.values()) for r in records])
    with override_settings(CLICKHOUSE_CLUSTER=cluster):  # the SQL only: the table stays local
        selected = {}
        for start, end in ((NOV, DEC), (NOV, JAN), (DEC, JAN)):
            condition, params = query.in_period(start, end)
            assert ("_partition_id" in condition) is not bool(cluster)
            sql = f"SELECT start_ns FROM usage_records WHERE {condition} ORDER BY start_ns"
            rows = query.select(sql, params)
            selected[start.month, end.month] = [row[0] for row in rows]
    assert selected == {
        (11, 12): [_ns(NOV), _ns(DEC) - 1],
        (11, 1): [_ns(NOV), _ns(DEC) - 1, _ns(DEC), _ns(JAN) - 1],
        (12, 1): [_ns(DEC), _ns(JAN) - 1],
    }
