"""The ClickHouse DDL, generated for one node (`cluster == ""`) or for a named cluster.

Migrations in `clickhouse_migrations/` call these functions. A migration's checksum is taken over
the DDL it generates, so editing a function used by an applied migration makes the migrator refuse
to run: change the schema with a new migration (ALTER …) instead.

`usage_records` holds one row per request: the stored columns are named exactly like the keys of
usage record format v1, so agent JSON lines insert as they are (JSONEachRow). The derived columns are
MATERIALIZED/DEFAULT, so `SELECT *` and inserts only ever see the record's own fields.

Cluster variant: a ReplicatedReplacingMergeTree table `usage_records_local` on every node and a
Distributed table `usage_records` over it, sharded by cityHash64(tenant). All copies of a record have
the same tenant, so they land on the same shard and `FINAL` (applied per shard) still removes them.
"""

from __future__ import annotations

import re

IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")

USAGE_RECORDS = "usage_records"
USAGE_RECORDS_LOCAL = "usage_records_local"
MIGRATIONS_TABLE = "clickhouse_migrations"

# (name, type) of the stored columns: the JSON keys of usage record format v1, in order.
RECORD_COLUMNS: tuple[tuple[str, str], ...] = (
    ("v", "UInt8"),
    ("record_id", "UUID"),
    ("agent_id", "LowCardinality(String)"),
    ("seq", "UInt64"),
    ("tenant", "LowCardinality(String)"),
    ("contract", "LowCardinality(String)"),
    ("package", "LowCardinality(String)"),
    ("client_request_id", "String"),
    ("model_id", "LowCardinality(String)"),
    ("weights_sha3", "String"),
    ("start_ns", "Int64"),
    ("end_ns", "Int64"),
    ("clock_drift_us", "Int64"),
    ("tokens_in", "UInt32"),
    ("tokens_out", "UInt32"),
    ("sla_class", "LowCardinality(String)"),
    ("hops", "Array(Tuple(layer LowCardinality(String), node String, latency_us UInt32))"),
    ("experts", "Array(Tuple(layer UInt16, expert UInt16, tokens UInt32))"),
    ("distinct_experts", "UInt32"),
    ("expert_tokens", "UInt64"),
    ("prefix_cache_hit_tokens", "UInt32"),
    ("expert_cache_hits", "UInt32"),
    ("expert_cache_misses", "UInt32"),
    ("status", "LowCardinality(String)"),
    # The record's `outcome` object as JSON text; '' when the record has null.
    ("outcome", "String"),
)
RECORD_FIELDS: tuple[str, ...] = tuple(name for name, _ in RECORD_COLUMNS)


def _layer_latency(layer: str) -> str:
    """Sum of the hops' latency_us on one tree layer ('L1' or 'l1', …)."""
    return f"arraySum(h -> if(lower(h.layer) = '{layer}', toUInt64(h.latency_us), 0), hops)"


DERIVED_COLUMNS: tuple[tuple[str, str], ...] = (
    ("start_time", "DateTime64(9, 'UTC') MATERIALIZED fromUnixTimestamp64Nano(start_ns, 'UTC')"),
    ("l1_latency_us", f"UInt64 MATERIALIZED {_layer_latency('l1')}"),
    ("l2_latency_us", f"UInt64 MATERIALIZED {_layer_latency('l2')}"),
    ("l3_latency_us", f"UInt64 MATERIALIZED {_layer_latency('l3')}"),
    ("ingested_at", "DateTime64(3, 'UTC') DEFAULT now64(3)"),
)

# Identical copies of a record share this key, so ReplacingMergeTree (and FINAL) keep one of them.
USAGE_RECORDS_ORDER_BY = "(tenant, contract, start_time, record_id)"
USAGE_RECORDS_PARTITION_BY = "toYYYYMM(start_time)"
# How many recent insert blocks (per partition) remember their dedup token: a retried batch is dropped.
DEDUP_WINDOW = 1000


def check_identifier(name: str) -> str:
    """`name` if it is a plain lowercase identifier (tables, columns, clusters), else ValueError."""
    if not isinstance(name, str) or not IDENTIFIER.match(name):
        raise ValueError(f"{name!r} is not a valid ClickHouse identifier (expected {IDENTIFIER.pattern})")
    return name


def on_cluster(cluster: str) -> str:
    """' ON CLUSTER <name>' for a cluster, '' for one node."""
    return f" ON CLUSTER {check_identifier(cluster)}" if cluster else ""


def _replicated_path(table: str, *, per_shard: bool = True) -> str:
    shard = "{shard}/" if per_shard else ""
    return f"'/clickhouse/tables/{shard}{{database}}/{table}'"


def _usage_records_body() -> str:
    columns = [*RECORD_COLUMNS, *DERIVED_COLUMNS]
    lines = [f"    {name} {spec}" for name, spec in columns]
    lines.append("    INDEX record_id_bloom record_id TYPE bloom_filter(0.01) GRANULARITY 4")
    return "(\n" + ",\n".join(lines) + "\n)"


def usage_records_ddl(cluster: str) -> list[str]:
    """CREATE statements for `usage_records` (one node) or local + Distributed tables (cluster)."""
    body = _usage_records_body()
    layout = f"PARTITION BY {USAGE_RECORDS_PARTITION_BY}\nORDER BY {USAGE_RECORDS_ORDER_BY}"
    if not cluster:
        return [
            f"CREATE TABLE IF NOT EXISTS {USAGE_RECORDS}\n{body}\n"
            f"ENGINE = ReplacingMergeTree\n{layout}\n"
            f"SETTINGS non_replicated_deduplication_window = {DEDUP_WINDOW}"
        ]
    name = check_identifier(cluster)
    return [
        f"CREATE TABLE IF NOT EXISTS {USAGE_RECORDS_LOCAL}{on_cluster(name)}\n{body}\n"
        f"ENGINE = ReplicatedReplacingMergeTree({_replicated_path(USAGE_RECORDS_LOCAL)}, '{{replica}}')\n"
        f"{layout}\n"
        f"SETTINGS replicated_deduplication_window = {DEDUP_WINDOW}",
        f"CREATE TABLE IF NOT EXISTS {USAGE_RECORDS}{on_cluster(name)} AS {USAGE_RECORDS_LOCAL}\n"
        f"ENGINE = Distributed({name}, currentDatabase(), {USAGE_RECORDS_LOCAL}, cityHash64(tenant))",
    ]


def migrations_table_ddl(cluster: str) -> str:
    """CREATE statement for the table where the migrator records applied migrations.

    On a cluster it is replicated to every node of every shard (one ZooKeeper path without {shard},
    replica names '{shard}-{replica}'), so whichever node the migrator talks to sees the same list.
    """
    columns = "(\n    name String,\n    checksum String,\n    applied_at DateTime64(3, 'UTC')\n)"
    if not cluster:
        engine = "MergeTree"
    else:
        path = _replicated_path(MIGRATIONS_TABLE, per_shard=False)
        engine = f"ReplicatedMergeTree({path}, '{{shard}}-{{replica}}')"
    return (
        f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE}{on_cluster(cluster)}\n{columns}\n"
        f"ENGINE = {engine}\nORDER BY name"
    )
