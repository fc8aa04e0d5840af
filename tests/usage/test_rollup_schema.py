"""The rollup DDL for a cluster (checked as text and by the engine's parser; no cluster runs here)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from clickhouse_store import query, schema

CLUSTER = "treemeter_prod"


@pytest.mark.parametrize("ddl", [schema.usage_hourly_ddl, schema.usage_experts_daily_ddl])
def test_cluster_rollups_are_replicated_deduplicated_and_fed_by_the_local_records(
    clickhouse: None, ddl: Callable[[str], list[str]]
) -> None:
    local, distributed, truncate, view, backfill = ddl(CLUSTER)
    table = distributed.split()[5]
    assert local.startswith(f"CREATE TABLE IF NOT EXISTS {table}_local ON CLUSTER {CLUSTER}\n")
    assert (
        f"ENGINE = ReplicatedAggregatingMergeTree('/clickhouse/tables/{{shard}}/{{database}}/{table}_local', "
        "'{replica}')"
    ) in local
    # The views' retried blocks are dropped only where the target keeps their ids.
    assert "SETTINGS replicated_deduplication_window = 1000" in local
    assert distributed.endswith(
        f"ENGINE = Distributed({CLUSTER}, currentDatabase(), {table}_local, cityHash64(tenant))"
    )
    assert truncate == f"TRUNCATE TABLE IF EXISTS {table}_local ON CLUSTER {CLUSTER}"
    assert view.startswith(
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {table}_mv ON CLUSTER {CLUSTER} TO {table}_local\n"
    )
    assert " FROM usage_records_local " in view
    assert backfill.startswith(f"INSERT INTO {table} SELECT ")
    assert " FROM usage_records FINAL " in backfill
    assert backfill.endswith(" SETTINGS insert_deduplicate = 0")
    for statement in (local, distributed, truncate, view, backfill):
        ((formatted,),) = query.select("SELECT formatQuery({sql:String})", {"sql": statement})
        assert formatted
