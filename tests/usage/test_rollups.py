"""The stored rollups agree exactly with the raw records: after normal ingest, over day and month
boundaries, after an outbox row stored twice, after the migration's backfill; and when a copy does get
in under a new token, the check finds it and the rebuild fixes it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, date, datetime
from functools import partial

import pytest
from django.core.management import call_command
from django.test import Client

from clickhouse_store import query
from clickhouse_store.migrator import load_migrations
from clickhouse_store.schema import ROLLUP_TABLES
from ingest.outbox import store_pending
from tests.ingest.support import refused_write
from tests.usage.conftest import World, at, ingest
from treemeter_records import canonical_bytes
from usage import selectors
from usage.selectors import UsageFilter
from usage.services import rebuild_rollups

pytestmark = pytest.mark.django_db

NOV_30 = datetime(2026, 11, 30, tzinfo=UTC)
DEC_1 = datetime(2026, 12, 1, tzinfo=UTC)
DEC_2 = datetime(2026, 12, 2, tzinfo=UTC)
PERIODS = [
    (NOV_30, DEC_2),  # across the month boundary (two partitions)
    (NOV_30, DEC_1),  # November's last day only
    (DEC_1, DEC_2),  # December's first day only
    (datetime(2026, 11, 30, 23, tzinfo=UTC), datetime(2026, 12, 1, 1, tzinfo=UTC)),  # around midnight
]
READS: dict[str, Callable[[UsageFilter], selectors.Answer]] = {
    **{
        f"timeseries {dimension} {interval}": partial(
            selectors.timeseries, dimension=dimension, interval=interval
        )
        for dimension in selectors.DIMENSIONS
        for interval in selectors.INTERVALS
    },
    "experts": selectors.experts,
    **{f"routing {i}": partial(selectors.routing, interval=i) for i in selectors.INTERVALS},
    "latency": selectors.latency,
    **{f"breakdown {by}": partial(selectors.breakdown, by=by) for by in selectors.BREAKDOWN_KEYS},
}


def assert_rollups_match_raw(tenants: tuple[str | None, ...] = ("usage-a", "usage-b", None)) -> None:
    """Every read answers the same from the stored rollups as from the raw records."""
    for tenant in tenants:
        for start, end in PERIODS:
            usage = UsageFilter(tenant=tenant, start=start, end=end)
            for name, read in READS.items():
                stored, raw = read(usage), read(replace(usage, rollups=False))
                assert not raw.from_rollup
                assert stored.body == raw.body, (name, tenant, start, end)
                if name != "experts" or (start.hour == 0 and end.hour == 0):
                    assert stored.from_rollup, name
    assert selectors.rollup_differences(date(2026, 11, 1), date(2026, 12, 31)) == []


def requests_of(tenant: str) -> str:
    usage = UsageFilter(tenant=tenant, start=NOV_30, end=DEC_2)
    (row,) = selectors.breakdown(usage, "day").body["rows"][:1]
    return row["requests"]


def stored_records() -> tuple[int, int]:
    """(physical rows, distinct records) in usage_records."""
    ((rows,),) = query.select("SELECT count() FROM usage_records")
    ((distinct,),) = query.select(f"SELECT count() FROM {query.RECORDS}")
    return rows, distinct


def test_rollups_match_the_raw_records_after_ingest(world: World) -> None:
    assert stored_records() == (14, 14)
    assert_rollups_match_raw()


def test_an_outbox_row_stored_twice_is_counted_once(world: World) -> None:
    records = [world.agent.record(world.b1, start_ns=at(2026, 11, 30, 23, 30)) for _ in range(4)]
    body = world.agent.batch(records).body()
    with refused_write("ingest_pendinginsert", "DELETE"):  # the insert reaches ClickHouse, the delete fails
        response = Client().post("/v1/ingest/batches", data=body, content_type="application/x-ndjson")
    assert (response.status_code, response.json()["accepted"]) == (200, 4)
    assert stored_records() == (18, 18)

    # The drain stores the outbox row again: the insert carries the same dedup token and is dropped,
    # by usage_records and by both rollups (their own deduplication window).
    assert store_pending() == 1
    assert stored_records() == (18, 18)
    assert requests_of("usage-b") == "9"
    assert_rollups_match_raw()


def test_a_copy_under_a_new_token_is_found_and_rebuilt(world: World) -> None:
    # An outbox row stored again after the engine's deduplication window has passed: usage_records
    # keeps the copies (FINAL hides them); the rollups count them.
    records = [world.agent.record(world.b1, start_ns=at(2026, 11, 30, 23, 30)) for _ in range(2)]
    extra = world.agent.record(world.b1, start_ns=at(2026, 11, 30, 23, 45))
    ingest(world.agent, [*records, extra])
    copies = b"\n".join(canonical_bytes(record) for record in records)
    query.insert_json_lines("usage_records", copies, dedup_token="a-token-the-engine-no-longer-remembers")
    assert stored_records() == (19, 17)

    assert selectors.rollup_differences(date(2026, 11, 1), date(2026, 12, 31)) == [
        {
            "tenant": "usage-b",
            "contract": "usage-b1",
            "day": date(2026, 11, 30),
            "rollup": {
                "requests": 10,
                "tokens_in": 5500,
                "tokens_out": 200,
                "cached_tokens": 100,
                "expert_tokens": 4760,
                "l3_us": 900_000,
                "hops": 50,
                "expert_cache_hits": 20,
                "expert_cache_misses": 10,
            },
            "raw": {
                "requests": 8,
                "tokens_in": 5300,
                "tokens_out": 160,
                "cached_tokens": 80,
                "expert_tokens": 3808,
                "l3_us": 720_000,
                "hops": 40,
                "expert_cache_hits": 16,
                "expert_cache_misses": 8,
            },
        }
    ]
    assert requests_of("usage-b") == "10"  # what the dashboard shows until the rebuild

    rebuild_rollups(date(2026, 11, 30), date(2026, 12, 1))
    assert requests_of("usage-b") == "8"
    assert_rollups_match_raw()


def test_the_command_lists_and_rebuilds_differences(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    call_command("usage_rollups", "2026-11-01", "2026-12-31")
    assert capsys.readouterr().out == "The rollups agree with the raw records.\n"
    query.command("TRUNCATE TABLE usage_experts_daily")
    query.command("DELETE FROM usage_hourly WHERE tenant = 'usage-a' AND hour >= '2026-12-01 00:00:00'")
    call_command("usage_rollups", "2026-11-01", "2026-12-31", "--rebuild")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("2026-12-01 usage-a usage-a1: rollup {'requests': 0,")
    assert out[1:] == ["Rebuilt 1 day(s); 0 difference(s) left."]
    # The rebuild recomputed both rollups of that day; the other days' experts are still gone.
    assert selectors.experts(UsageFilter(tenant="usage-a", start=DEC_1, end=DEC_2)).body["cells"] == [
        [0, 1, 300],
        [0, 4, 176],
        [1, 2, 476],
    ]
    rebuild_rollups(date(2026, 11, 30), date(2026, 12, 1))
    assert_rollups_match_raw()


def test_the_migrations_backfill_existing_records_once(world: World) -> None:
    for table in ROLLUP_TABLES:
        query.command(f"TRUNCATE TABLE {table}")  # a deployment that had records before the rollups
    rollups = [m for m in load_migrations() if m.name in ("0002_usage_hourly", "0003_usage_experts_daily")]
    assert len(rollups) == 2
    for _ in range(2):  # a re-run starts over rather than adding the backfill twice
        for migration in rollups:
            for statement in migration.statements(""):
                query.command(statement)
        assert_rollups_match_raw()
        assert requests_of("usage-a") == "7"
