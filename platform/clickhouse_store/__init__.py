"""ClickHouse storage for usage records: one client, one query layer, versioned schema migrations.

- `client`: the process-wide client built from settings.CLICKHOUSE_URL (`get_client`, `close_client`).
- `query`: the only module that sends SQL (`select`, `select_dicts`, `command`, `insert_rows`,
  `insert_json_lines`) and `RECORDS`, the FROM clause for deduplicated reads of usage records.
- `schema`: the DDL, for one node or for a cluster (settings.CLICKHOUSE_CLUSTER).
- `migrator` + `clickhouse_migrations/`: ordered migrations recorded in ClickHouse itself
  (`apply_migrations()`, `python manage.py migrate_clickhouse`).
"""
