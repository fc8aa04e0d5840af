"""Daily expert activations (layer × expert) for the dashboard heatmap, backfilled from the records."""

from clickhouse_store.schema import usage_experts_daily_ddl

description = "usage_experts_daily: tokens and activations per tenant/contract/package/day/layer/expert"


def operations(cluster: str) -> list[str]:
    return usage_experts_daily_ddl(cluster)
