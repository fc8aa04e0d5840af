"""The per-request usage record table."""

from clickhouse_store.schema import usage_records_ddl

description = "usage_records: one row per request, record format v1 columns plus derived latency/time columns"


def operations(cluster: str) -> list[str]:
    return usage_records_ddl(cluster)
