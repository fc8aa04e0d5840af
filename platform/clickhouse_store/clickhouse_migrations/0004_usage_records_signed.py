"""Record format v2's signed parts: the router's decision and the executor's signature, as JSON text."""

from clickhouse_store.schema import usage_records_signed_columns_ddl

description = "usage_records: decision and executor_sig columns (record format v2), '' on v1 records"


def operations(cluster: str) -> list[str]:
    return usage_records_signed_columns_ddl(cluster)
