"""What the router's signed claims add to a record: the attempts a retry supersedes, a job's queue time."""

from clickhouse_store.schema import usage_records_claim_columns_ddl

description = "usage_records: supersedes and queue_latency_us, from the v2 decision's claims"


def operations(cluster: str) -> list[str]:
    return usage_records_claim_columns_ddl(cluster)
