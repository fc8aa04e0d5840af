"""The only place SQL is sent to ClickHouse.

Values always travel as server-side bound parameters: write `{name:Type}` placeholders in the SQL
and pass `params={"name": value}`. Each params key must have a placeholder and each placeholder a
key, so clickhouse-connect never falls back to formatting values into the SQL text on the client.
Table and column names come from our own code and are checked against `schema.IDENTIFIER`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from .client import locked_client
from .schema import SANDBOX_RECORDS, USAGE_RECORDS, check_identifier

RECORDS = f"{USAGE_RECORDS} FINAL"
# A customer sandbox's records: the same columns, read under usage_records' name so that queries naming
# its columns qualified (`usage_records.contract`) read either table.
SANDBOX = f"{SANDBOX_RECORDS} AS {USAGE_RECORDS} FINAL"


def records(sandbox: bool = False) -> str:
    """The records' table as the readers name it: production's, or the customer sandboxes'."""
    return SANDBOX if sandbox else RECORDS


"""The FROM clause for reading usage records: every billing and SLA aggregate reads through it.

Reads must never count a record twice. Writes already drop copies: the ingest layer commits
per-agent sequence ranges (a replayed batch is detected before it is inserted) and each batch insert
carries an `insert_deduplication_token`, so a retried insert is dropped by the engine. A copy can
still get in (a batch re-sent under a new token, a token older than the dedup window), and
ReplacingMergeTree only removes copies when parts happen to merge. `FINAL` makes the read itself
collapse rows with the same key (tenant, contract, start_time, record_id), so a copy is never
counted, merged or not. It is the safety net, and it is not free: /work/shared/notes/performance.md
measured a GROUP BY over 10M rows at ~0.2 s plain and ~1.5 s with FINAL (`LIMIT 1 BY record_id` was
slower still). Always filter by tenant (the key's first column) and time so FINAL reads few parts.
A partition that is one merged part (a settled month) is read without merging, as fast as a plain
read, provided only the columns read are needed: count an array through its size subcolumn
(`hops.size0`), since under FINAL `length(hops)` reads every element.
"""


def in_period(start: datetime, end: datetime) -> tuple[str, dict[str, Any]]:
    """The condition on usage records for start_time in [start, end), and its parameters.

    A period of whole UTC calendar months on one node is selected by partition
    (`_partition_id`, partitions being toYYYYMM(start_time)): the engine picks the parts and
    checks nothing per row, where the time range costs about a third of a month's rating
    aggregate. Any other period, and a cluster's Distributed table, compares start_time.
    """
    months = _whole_months(start, end)
    if months and not settings.CLICKHOUSE_CLUSTER:
        return "_partition_id IN {period_months:Array(String)}", {"period_months": months}
    return (
        "start_time >= {period_start:DateTime64(9, 'UTC')} "
        "AND start_time < {period_end:DateTime64(9, 'UTC')}",
        {"period_start": start, "period_end": end},
    )


_MONTH_START = (1, 0, 0, 0, 0)  # day, hour, minute, second, microsecond


def _whole_months(start: datetime, end: datetime) -> list[str]:
    """The partition ids ('YYYYMM') of [start, end) when it is whole UTC months, else []."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    if start >= end or any(
        (m.day, m.hour, m.minute, m.second, m.microsecond) != _MONTH_START for m in (start, end)
    ):
        return []
    months, year, month = [], start.year, start.month
    while (year, month) < (end.year, end.month):
        months.append(f"{year:04d}{month:02d}")
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return months


_PLACEHOLDER = re.compile(r"\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*:")
# JSON objects (`outcome`) go into String columns as their JSON text; null becomes the default ('').
_JSON_LINES_SETTINGS = {
    "input_format_json_read_objects_as_strings": 1,
    "input_format_null_as_default": 1,
}


def _bound(sql: str, params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """`params` as a dict, after checking they match the SQL's `{name:Type}` placeholders."""
    placeholders = set(_PLACEHOLDER.findall(sql))
    given = set(params or {})
    if placeholders != given:
        raise ValueError(
            "query parameters must match the {name:Type} placeholders of the SQL: "
            f"missing {sorted(placeholders - given)}, unused {sorted(given - placeholders)}"
        )
    return dict(params) if params else None


def _insert_settings(dedup_token: str | None) -> dict[str, Any]:
    if dedup_token is None:
        return {}
    if not dedup_token:
        raise ValueError("dedup_token must be a non-empty string (an empty token disables deduplication)")
    return {"insert_deduplication_token": dedup_token}


def select(sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
    """Rows of a query, as tuples."""
    bound = _bound(sql, params)
    with locked_client() as client:
        result = client.query(sql, parameters=bound)
        return [tuple(row) for row in result.result_rows]


def select_dicts(sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rows of a query, as dicts keyed by column name."""
    bound = _bound(sql, params)
    with locked_client() as client:
        result = client.query(sql, parameters=bound)
        names = result.column_names
        return [dict(zip(names, row, strict=True)) for row in result.result_rows]


# How `select_json_rows` writes rows: 64-bit integers as JSON numbers (not strings), named tuples as
# objects keyed by their element names, `/` as itself (not `\/`).
_JSON_ROWS = {
    "output_format_json_quote_64bit_integers": 0,
    "output_format_json_named_tuples_as_objects": 1,
    "output_format_json_escape_forward_slashes": 0,
}


def select_json_rows(sql: str, params: Mapping[str, Any] | None = None) -> bytes:
    """The rows of a query as the engine writes them in JSONEachRow: one JSON object per line, without
    whitespace."""
    bound = _bound(sql, params)
    with locked_client() as client:
        return bytes(client.raw_query(sql, parameters=bound, fmt="JSONEachRow", settings=_JSON_ROWS))


def command(sql: str, params: Mapping[str, Any] | None = None) -> None:
    """Run a statement that returns no rows (DDL, TRUNCATE, ALTER …)."""
    bound = _bound(sql, params)
    with locked_client() as client:
        client.command(sql, parameters=bound)


def insert_rows(
    table: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    dedup_token: str | None = None,
    column_oriented: bool = False,
) -> None:
    """Insert Python values: `rows` is a list of rows, or of columns with `column_oriented=True`.

    With `dedup_token`, a repeat of this insert with the same token is dropped by the engine
    (tables with a deduplication window, like usage_records).
    """
    check_identifier(table)
    for column in columns:
        check_identifier(column)
    settings = _insert_settings(dedup_token)
    if not rows:
        return
    with locked_client() as client:
        client.insert(
            table,
            rows,
            column_names=list(columns),
            column_oriented=column_oriented,
            settings=settings,
        )


def insert_json_lines(table: str, body: bytes, *, dedup_token: str | None = None) -> None:
    """Insert newline-delimited JSON objects as they are: the engine parses them (JSONEachRow).

    Keys map to columns by name; JSON objects bound for String columns are stored as their JSON
    text and nulls as the column default. With `dedup_token`, a retried insert is dropped.
    """
    check_identifier(table)
    settings = {**_JSON_LINES_SETTINGS, **_insert_settings(dedup_token)}
    if not body.strip():
        return
    with locked_client() as client:
        client.raw_insert(table, None, body, settings=settings, fmt="JSONEachRow")
