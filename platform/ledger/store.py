"""Records as stored in ClickHouse, turned back into their canonical bytes (what the log hashed)."""

from __future__ import annotations

from clickhouse_store.queries.records import stored_records
from treemeter_records import canonical_bytes_fast


def stored_lines(tenant: str, contract: str, start_ns: int, end_ns: int) -> dict[str, bytes]:
    """record_id → canonical bytes of each stored record of a contract in [start_ns, end_ns)."""
    out: dict[str, bytes] = {}
    for record in stored_records(tenant, contract, start_ns, end_ns):
        out[record["record_id"]] = canonical_bytes_fast(record)
    return out
