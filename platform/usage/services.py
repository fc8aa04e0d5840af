"""Writes for usage: recomputing the dashboard rollups from the deduplicated raw records."""

from __future__ import annotations

from datetime import date

from clickhouse_store.queries import usage as usage_sql

from .cache import retire_every_answer


def rebuild_rollups(start: date, end: date) -> None:
    """Replace both rollups' rows for the UTC days [start, end) with a recomputation from the raw
    records (FINAL), e.g. after `selectors.rollup_differences` found a copy counted twice, then retire
    every cached answer. Run it for days whose ingest has settled (clickhouse_store.queries.usage.
    rebuild_rollups says why).
    """
    usage_sql.rebuild_rollups(start, end)
    retire_every_answer()
