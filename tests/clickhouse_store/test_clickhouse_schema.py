"""The generated DDL: the one-node variant runs here; the cluster variant is checked as text and parsed."""

from __future__ import annotations

import pytest

from clickhouse_store import query, schema

V1_FIELDS = [
    *("v", "record_id", "agent_id", "seq", "tenant", "contract", "package", "client_request_id"),
    *("model_id", "weights_sha3", "start_ns", "end_ns", "clock_drift_us", "tokens_in", "tokens_out"),
    *("sla_class", "hops", "experts", "distinct_experts", "expert_tokens", "prefix_cache_hit_tokens"),
    *("expert_cache_hits", "expert_cache_misses", "status", "outcome"),
]


def test_single_node_usage_records_ddl() -> None:
    (ddl,) = schema.usage_records_ddl("")
    assert ddl.startswith("CREATE TABLE IF NOT EXISTS usage_records\n")
    assert "ON CLUSTER" not in ddl
    assert "ENGINE = ReplacingMergeTree\n" in ddl
    assert "PARTITION BY toYYYYMM(start_time)" in ddl
    assert "ORDER BY (tenant, contract, start_time, record_id)" in ddl
    assert "SETTINGS non_replicated_deduplication_window = 1000" in ddl
    assert "INDEX record_id_bloom record_id TYPE bloom_filter" in ddl


def test_cluster_usage_records_ddl() -> None:
    local, distributed = schema.usage_records_ddl("treemeter_prod")
    assert local.startswith("CREATE TABLE IF NOT EXISTS usage_records_local ON CLUSTER treemeter_prod\n")
    assert (
        "ENGINE = ReplicatedReplacingMergeTree("
        "'/clickhouse/tables/{shard}/{database}/usage_records_local', '{replica}')"
    ) in local
    assert "ORDER BY (tenant, contract, start_time, record_id)" in local
    assert "PARTITION BY toYYYYMM(start_time)" in local
    assert "SETTINGS replicated_deduplication_window = 1000" in local
    assert "non_replicated" not in local
    assert "INDEX record_id_bloom record_id TYPE bloom_filter" in local
    assert distributed == (
        "CREATE TABLE IF NOT EXISTS usage_records ON CLUSTER treemeter_prod AS usage_records_local\n"
        "ENGINE = Distributed(treemeter_prod, currentDatabase(), usage_records_local, cityHash64(tenant))"
    )


def test_migrations_table_ddl_both_variants() -> None:
    single = schema.migrations_table_ddl("")
    assert "ON CLUSTER" not in single
    assert "ENGINE = MergeTree\nORDER BY name" in single
    assert "applied_at DateTime64(3, 'UTC')" in single
    cluster = schema.migrations_table_ddl("treemeter_prod")
    assert cluster.startswith("CREATE TABLE IF NOT EXISTS clickhouse_migrations ON CLUSTER treemeter_prod\n")
    assert (
        "ENGINE = ReplicatedMergeTree("
        "'/clickhouse/tables/{database}/clickhouse_migrations', '{shard}-{replica}')"
    ) in cluster


@pytest.mark.parametrize("name", ["prod; DROP TABLE x", "Prod", "1prod", "prod-eu", "", "a b"])
def test_bad_identifiers_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="not a valid ClickHouse identifier"):
        schema.check_identifier(name)
    if name:  # "" means one node
        with pytest.raises(ValueError):
            schema.usage_records_ddl(name)
        with pytest.raises(ValueError):
            schema.migrations_table_ddl(name)


def test_record_fields_are_the_v1_keys() -> None:
    assert list(schema.RECORD_FIELDS) == V1_FIELDS


def test_cluster_ddl_parses(ch: None) -> None:
    """The cluster can't run here (no Keeper, no cluster), but the engine's parser checks the syntax."""
    statements = [*schema.usage_records_ddl("treemeter_prod"), schema.migrations_table_ddl("treemeter_prod")]
    for statement in statements:
        ((formatted,),) = query.select("SELECT formatQuery({sql:String})", {"sql": statement})
        assert "ON CLUSTER treemeter_prod" in formatted


def test_created_table_matches_the_record_format(ch: None) -> None:
    columns = query.select(
        "SELECT name, type, default_kind FROM system.columns "
        "WHERE database = currentDatabase() AND table = {table:String} ORDER BY position",
        {"table": "usage_records"},
    )
    stored = [(name, type_) for name, type_, kind in columns if kind == ""]
    assert stored == list(schema.RECORD_COLUMNS)
    derived = {name: (type_, kind) for name, type_, kind in columns if kind != ""}
    assert derived == {
        "start_time": ("DateTime64(9, 'UTC')", "MATERIALIZED"),
        "l1_latency_us": ("UInt64", "MATERIALIZED"),
        "l2_latency_us": ("UInt64", "MATERIALIZED"),
        "l3_latency_us": ("UInt64", "MATERIALIZED"),
        "ingested_at": ("DateTime64(3, 'UTC')", "DEFAULT"),
        # Record format v2's signed parts (migration 0004), '' on a v1 record.
        "decision": ("String", "DEFAULT"),
        "executor_sig": ("String", "DEFAULT"),
        # What the router's claims add (migration 0005): a retry's superseded attempts, a job's wait.
        "supersedes": ("Array(UUID)", "MATERIALIZED"),
        "queue_latency_us": ("UInt64", "MATERIALIZED"),
        # The optional record field (migration 0006): 0 when the record has none.
        "prefix_cache_write_tokens": ("UInt32", "DEFAULT"),
    }
    ((engine, sorting_key),) = query.select(
        "SELECT engine, sorting_key FROM system.tables "
        "WHERE database = currentDatabase() AND name = {t:String}",
        {"t": "usage_records"},
    )
    assert (engine, sorting_key) == ("ReplacingMergeTree", "tenant, contract, start_time, record_id")


def test_cache_write_column_ddl_both_variants(ch: None) -> None:
    assert schema.usage_records_cache_write_columns_ddl("") == [
        "ALTER TABLE usage_records ADD COLUMN IF NOT EXISTS prefix_cache_write_tokens UInt32 DEFAULT 0"
    ]
    cluster = schema.usage_records_cache_write_columns_ddl("treemeter_prod")
    assert cluster == [
        f"ALTER TABLE {table} ON CLUSTER treemeter_prod ADD COLUMN IF NOT EXISTS prefix_cache_write_tokens "
        "UInt32 DEFAULT 0"
        for table in ("usage_records_local", "usage_records")
    ]
    for statement in cluster:
        ((formatted,),) = query.select("SELECT formatQuery({sql:String})", {"sql": statement})
        assert "ON CLUSTER treemeter_prod" in formatted
    assert schema.OPTIONAL_FIELDS == ("prefix_cache_write_tokens",)
