"""Writes for usage: recomputing the dashboard rollups from the deduplicated raw records."""

from __future__ import annotations

from datetime import UTC, date, datetime, time

from clickhouse_store import query
from clickhouse_store.client import locked_client
from clickhouse_store.schema import (
    NO_INSERT_DEDUP,
    USAGE_EXPERTS_DAILY,
    USAGE_HOURLY,
    usage_experts_daily_select,
    usage_hourly_select,
)

from .cache import retire_every_answer

_RAW_RANGE = (
    "start_time >= {start_time:DateTime64(9, 'UTC')} AND start_time < {end_time:DateTime64(9, 'UTC')}"
)


def rebuild_rollups(start: date, end: date) -> None:
    """Replace both rollups' rows for the UTC days [start, end) with a recomputation from the raw
    records (FINAL), e.g. after `selectors.rollup_differences` found a copy counted twice.

    Rows ingested for those days while this runs may be counted twice or not at all: run it for days
    whose ingest has settled (past the lateness window), or check again afterwards.
    """
    raw = {"start_time": datetime.combine(start, time(), UTC), "end_time": datetime.combine(end, time(), UTC)}
    with locked_client():  # one rebuild at a time in this process, no query of ours in between
        query.command(
            f"DELETE FROM {USAGE_HOURLY} "  # noqa: S608 - constant table name
            "WHERE hour >= {start_time:DateTime('UTC')} AND hour < {end_time:DateTime('UTC')}",
            raw,
        )
        query.command(
            f"INSERT INTO {USAGE_HOURLY} {usage_hourly_select(query.RECORDS, _RAW_RANGE)}{NO_INSERT_DEDUP}",
            raw,
        )
        query.command(
            f"DELETE FROM {USAGE_EXPERTS_DAILY} WHERE day >= {{start:Date}} AND day < {{end:Date}}",  # noqa: S608
            {"start": start, "end": end},
        )
        query.command(
            f"INSERT INTO {USAGE_EXPERTS_DAILY} "
            f"{usage_experts_daily_select(query.RECORDS, _RAW_RANGE)}{NO_INSERT_DEDUP}",
            raw,
        )
    retire_every_answer()
