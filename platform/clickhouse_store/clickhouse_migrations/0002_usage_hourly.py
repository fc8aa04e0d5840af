"""Hourly usage rollup for the dashboard, fed by a materialised view and backfilled from the records."""

from clickhouse_store.schema import usage_hourly_ddl

description = "usage_hourly: per tenant/contract/package/status/hour sums and latency quantile states"


def operations(cluster: str) -> list[str]:
    return usage_hourly_ddl(cluster)
