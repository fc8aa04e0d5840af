"""ClickHouse schema migrations, applied in name order by `clickhouse_store.migrator`.

Each module is named `NNNN_<what>.py` and exposes `description: str` and
`operations(cluster: str) -> list[str]`: the statements to run ("" = one node, else a cluster
name). Statements should be idempotent (IF NOT EXISTS …): DDL is not transactional, and a migration
that fails halfway is re-run from its first statement. Never edit an applied migration (its
checksum is recorded); add a new one.

Not named `migrations/`: in a Django app that name is Django's own migrations package.
"""
