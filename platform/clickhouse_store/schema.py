"""The ClickHouse DDL, generated for one node (`cluster == ""`) or for a named cluster.

Migrations in `clickhouse_migrations/` call these functions. A migration's checksum is taken over
the DDL it generates, so editing a function used by an applied migration makes the migrator refuse
to run: change the schema with a new migration (ALTER …) instead.

`usage_records` holds one row per request: the stored columns are named exactly like the keys of
usage record formats v1 and v2, so agent JSON lines insert as they are (JSONEachRow). The derived columns are
MATERIALIZED/DEFAULT, so `SELECT *` and inserts only ever see the record's own fields. A record's
optional fields (absent means 0) are DEFAULT 0 columns, so a line without them inserts as it is.

Cluster variant: a ReplicatedReplacingMergeTree table `usage_records_local` on every node and a
Distributed table `usage_records` over it, sharded by cityHash64(tenant). All copies of a record have
the same tenant, so they land on the same shard and `FINAL` (applied per shard) still removes them.
"""

from __future__ import annotations

import re
from collections.abc import Callable

IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")

USAGE_RECORDS = "usage_records"
USAGE_RECORDS_LOCAL = "usage_records_local"
# A customer sandbox's records: the same columns, another table, so no production reader meets them.
SANDBOX_RECORDS = "sandbox_records"
SANDBOX_RECORDS_LOCAL = "sandbox_records_local"
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
# Record format v2's signed parts (the router's decision, the executor's signature) as their JSON
# text, added by migration 0004; '' on a v1 record.
SIGNED_COLUMNS: tuple[tuple[str, str], ...] = (
    ("decision", "String DEFAULT ''"),
    ("executor_sig", "String DEFAULT ''"),
)
SIGNED_FIELDS: tuple[str, ...] = tuple(name for name, _ in SIGNED_COLUMNS)


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


def usage_records_signed_columns_ddl(cluster: str) -> list[str]:
    """ALTER statements adding v2's signed parts to `usage_records` (and its local table on a cluster)."""
    tables = [USAGE_RECORDS_LOCAL, USAGE_RECORDS] if cluster else [USAGE_RECORDS]
    return [
        f"ALTER TABLE {table}{on_cluster(cluster)} ADD COLUMN IF NOT EXISTS {name} {spec}"
        for table in tables
        for name, spec in SIGNED_COLUMNS
    ]


# What the router's signed claims say beyond the record's own fields, added by migration 0005: the
# record ids a retry supersedes (decision.claims.supersedes; empty on a first attempt and on v1), which
# are never billed, and a queued job's time in the router's queue (decision.claims.queued_us; 0 for an
# interactive request), the queue hop of SLA objectives on layer "queue".
CLAIM_COLUMNS: tuple[tuple[str, str], ...] = (
    ("supersedes", "Array(UUID) MATERIALIZED JSONExtract(decision, 'claims', 'supersedes', 'Array(UUID)')"),
    ("queue_latency_us", "UInt64 MATERIALIZED JSONExtractUInt(decision, 'claims', 'queued_us')"),
)


def usage_records_claim_columns_ddl(cluster: str) -> list[str]:
    """ALTER statements adding the claims' columns (and to the local table on a cluster)."""
    tables = [USAGE_RECORDS_LOCAL, USAGE_RECORDS] if cluster else [USAGE_RECORDS]
    return [
        f"ALTER TABLE {table}{on_cluster(cluster)} ADD COLUMN IF NOT EXISTS {name} {spec}"
        for table in tables
        for name, spec in CLAIM_COLUMNS
    ]


# Optional record fields (v1 and v2, absent means 0), added by migration 0006: the prompt tokens the
# engine wrote into its prefix cache. DEFAULT 0, so a JSON line without the key inserts 0; a record read
# back leaves the key out when it is 0, as its agent did (docs/record-format.md).
CACHE_WRITE_COLUMNS: tuple[tuple[str, str], ...] = (("prefix_cache_write_tokens", "UInt32 DEFAULT 0"),)
OPTIONAL_FIELDS: tuple[str, ...] = tuple(name for name, _ in CACHE_WRITE_COLUMNS)


def usage_records_cache_write_columns_ddl(cluster: str) -> list[str]:
    """ALTER statements adding `prefix_cache_write_tokens` (and to the local table on a cluster)."""
    tables = [USAGE_RECORDS_LOCAL, USAGE_RECORDS] if cluster else [USAGE_RECORDS]
    return [
        f"ALTER TABLE {table}{on_cluster(cluster)} ADD COLUMN IF NOT EXISTS {name} {spec}"
        for table in tables
        for name, spec in CACHE_WRITE_COLUMNS
    ]


def sandbox_records_ddl(cluster: str) -> list[str]:
    """CREATE statements for `sandbox_records`: `usage_records`' columns, engine and layout as they are
    now (one node), or local + Distributed tables like usage_records' (cluster)."""
    if not cluster:
        return [f"CREATE TABLE IF NOT EXISTS {SANDBOX_RECORDS} AS {USAGE_RECORDS}"]
    name = check_identifier(cluster)
    return [
        f"CREATE TABLE IF NOT EXISTS {SANDBOX_RECORDS_LOCAL}{on_cluster(name)} AS {USAGE_RECORDS_LOCAL}\n"
        f"ENGINE = ReplicatedReplacingMergeTree({_replicated_path(SANDBOX_RECORDS_LOCAL)}, '{{replica}}')\n"
        f"PARTITION BY {USAGE_RECORDS_PARTITION_BY}\nORDER BY {USAGE_RECORDS_ORDER_BY}\n"
        f"SETTINGS replicated_deduplication_window = {DEDUP_WINDOW}",
        f"CREATE TABLE IF NOT EXISTS {SANDBOX_RECORDS}{on_cluster(name)} AS {SANDBOX_RECORDS_LOCAL}\n"
        f"ENGINE = Distributed({name}, currentDatabase(), {SANDBOX_RECORDS_LOCAL}, cityHash64(tenant))",
    ]


def sandbox_records_delete(cluster: str) -> str:
    """The mutation deleting one sandbox contract's records (its tenant and contract bound parameters)."""
    table = SANDBOX_RECORDS_LOCAL if cluster else SANDBOX_RECORDS
    return (
        f"ALTER TABLE {table}{on_cluster(cluster)} DELETE "
        "WHERE tenant = {tenant:String} AND contract = {contract:String}"
    )


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


# Rollups behind the usage dashboard (usage.selectors): AggregatingMergeTree tables fed by materialised
# views on every insert into usage_records, and backfilled from the raw table by their migration.
USAGE_HOURLY = "usage_hourly"
USAGE_EXPERTS_DAILY = "usage_experts_daily"
ROLLUP_TABLES: tuple[str, ...] = (USAGE_HOURLY, USAGE_EXPERTS_DAILY)
LATENCY_QUANTILES = "0.5, 0.95, 0.99"
# Backfills and rebuilds of a rollup must never be dropped as a repeat of an earlier identical insert.
NO_INSERT_DEDUP = " SETTINGS insert_deduplicate = 0"

# (column, type, expression over one usage record); summed per rollup key.
USAGE_HOURLY_SUMS: tuple[tuple[str, str], ...] = (
    ("requests", "1"),  # sum(1): the record count
    ("tokens_in", "tokens_in"),
    ("tokens_out", "tokens_out"),
    ("cached_tokens", "prefix_cache_hit_tokens"),
    ("expert_tokens", "expert_tokens"),
    ("l3_us", "l3_latency_us"),
    ("hops", "length(hops)"),
    ("expert_cache_hits", "expert_cache_hits"),
    ("expert_cache_misses", "expert_cache_misses"),
)
# (column, latency in µs of one record) whose quantile states the hourly rollup keeps.
USAGE_HOURLY_LATENCIES: tuple[tuple[str, str], ...] = (
    ("lat_l1", "l1_latency_us"),
    ("lat_l2", "l2_latency_us"),
    ("lat_l3", "l3_latency_us"),
    ("lat_total", "toUInt64(intDiv(end_ns - start_ns, 1000))"),
)


def _rollup_engine(table: str, cluster: str, engine: str, layout: str) -> str:
    """The engine clause of a rollup table, with a deduplication window.

    The window matters: a retried insert into usage_records (same insert_deduplication_token) is
    dropped there, but its materialised views still receive the block; they drop it only when their
    own target table keeps the block ids of recent inserts (deduplicate_blocks_in_dependent_
    materialized_views). Without a window the rollup would count the retried batch again.
    """
    if not cluster:
        return f"ENGINE = {engine}\n{layout}\nSETTINGS non_replicated_deduplication_window = {DEDUP_WINDOW}"
    path = _replicated_path(table)
    return (
        f"ENGINE = Replicated{engine}({path}, '{{replica}}')\n{layout}\n"
        f"SETTINGS replicated_deduplication_window = {DEDUP_WINDOW}"
    )


def usage_hourly_select(source: str, where: str = "") -> str:
    """The hourly rollup of the records in `source` (a table, or a table with FINAL), optionally
    filtered by a WHERE condition; the dashboard computes it on the fly from raw records this way."""
    sums = ", ".join(f"toUInt64(sum({expr})) AS {name}" for name, expr in USAGE_HOURLY_SUMS)
    latencies = ", ".join(
        f"quantilesState({LATENCY_QUANTILES})({expr}) AS {name}" for name, expr in USAGE_HOURLY_LATENCIES
    )
    return (
        "SELECT tenant, contract, package, status, toStartOfHour(start_time) AS hour, "  # noqa: S608
        f"{sums}, {latencies} FROM {source}{_where(where)} "
        "GROUP BY tenant, contract, package, status, hour"
    )


def _where(condition: str) -> str:
    return f" WHERE {condition}" if condition else ""


def usage_experts_daily_select(source: str, where: str = "") -> str:
    """Expert activations per day × layer × expert of the records in `source` (optionally filtered)."""
    return (
        "SELECT tenant, contract, package, toDate(start_time) AS day, e.layer AS layer, "  # noqa: S608
        "e.expert AS expert, toUInt64(sum(e.tokens)) AS tokens, toUInt64(count()) AS activations "
        f"FROM {source} ARRAY JOIN experts AS e{_where(where)} "
        "GROUP BY tenant, contract, package, day, layer, expert"
    )


def _rollup_ddl(
    cluster: str, table: str, columns: list[str], layout: str, select: Callable[[str], str]
) -> list[str]:
    """Target table (+ Distributed table on a cluster), then the view, then the backfill.

    The target is emptied before the view exists, so a re-run of the migration starts over rather than
    adding the backfill twice. Rows inserted between the view's creation and the backfill's read would
    be counted twice: apply migrations before ingest starts (the deploy order), or run
    `manage.py usage_rollups --rebuild` afterwards.
    """
    body = "(\n" + ",\n".join(f"    {column}" for column in columns) + "\n)"
    local = f"{table}_local" if cluster else table
    source = USAGE_RECORDS_LOCAL if cluster else USAGE_RECORDS
    statements = [
        f"CREATE TABLE IF NOT EXISTS {local}{on_cluster(cluster)}\n{body}\n"
        + _rollup_engine(local, cluster, "AggregatingMergeTree", layout)
    ]
    if cluster:
        statements.append(
            f"CREATE TABLE IF NOT EXISTS {table}{on_cluster(cluster)} AS {local}\n"
            f"ENGINE = Distributed({check_identifier(cluster)}, currentDatabase(), {local}, "
            "cityHash64(tenant))"
        )
    statements += [
        f"TRUNCATE TABLE IF EXISTS {local}{on_cluster(cluster)}",
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {table}_mv{on_cluster(cluster)} TO {local}\n"
        f"AS {select(source)}",
        f"INSERT INTO {table} {select(USAGE_RECORDS + ' FINAL')}{NO_INSERT_DEDUP}",
    ]
    return statements


def usage_hourly_ddl(cluster: str) -> list[str]:
    """`usage_hourly`: per tenant, contract, package, status and UTC hour, the sums of
    USAGE_HOURLY_SUMS and quantile states of USAGE_HOURLY_LATENCIES."""
    columns = [
        "tenant LowCardinality(String)",
        "contract LowCardinality(String)",
        "package LowCardinality(String)",
        "status LowCardinality(String)",
        "hour DateTime('UTC')",
        *(f"{name} SimpleAggregateFunction(sum, UInt64)" for name, _ in USAGE_HOURLY_SUMS),
        *(
            f"{name} AggregateFunction(quantiles({LATENCY_QUANTILES}), UInt64)"
            for name, _ in USAGE_HOURLY_LATENCIES
        ),
    ]
    layout = "PARTITION BY toYYYYMM(hour)\nORDER BY (tenant, hour, contract, package, status)"
    return _rollup_ddl(cluster, USAGE_HOURLY, columns, layout, usage_hourly_select)


def usage_experts_daily_ddl(cluster: str) -> list[str]:
    """`usage_experts_daily`: per tenant, contract, package, UTC day, layer and expert, the tokens routed
    to the expert and the number of records that activated it."""
    columns = [
        "tenant LowCardinality(String)",
        "contract LowCardinality(String)",
        "package LowCardinality(String)",
        "day Date",
        "layer UInt16",
        "expert UInt16",
        "tokens SimpleAggregateFunction(sum, UInt64)",
        "activations SimpleAggregateFunction(sum, UInt64)",
    ]
    layout = "PARTITION BY toYYYYMM(day)\nORDER BY (tenant, day, contract, package, layer, expert)"
    return _rollup_ddl(cluster, USAGE_EXPERTS_DAILY, columns, layout, usage_experts_daily_select)
