"""A customer sandbox's records, kept apart from production's: a table of their own."""

from clickhouse_store.schema import sandbox_records_ddl

description = "sandbox_records: usage_records' columns and layout, for sandbox contracts' records"


def operations(cluster: str) -> list[str]:
    return sandbox_records_ddl(cluster)
