from django.apps import AppConfig


class ClickhouseStoreConfig(AppConfig):
    name = "clickhouse_store"
    label = "clickhouse_store"
    verbose_name = "ClickHouse store"
