"""The records' optional prefix_cache_write_tokens: prompt tokens the engine wrote into its prefix cache."""

from clickhouse_store.schema import usage_records_cache_write_columns_ddl

description = "usage_records: prefix_cache_write_tokens (optional record field), 0 when the record has none"


def operations(cluster: str) -> list[str]:
    return usage_records_cache_write_columns_ddl(cluster)
