"""Records as stored in ClickHouse, turned back into their canonical bytes (what the log hashed)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from clickhouse_store import query
from clickhouse_store.schema import RECORD_FIELDS
from treemeter_records import canonical_bytes_fast

_COLUMNS = ", ".join("toString(record_id)" if name == "record_id" else name for name in RECORD_FIELDS)
_PERIOD_SQL = (
    f"SELECT {_COLUMNS} FROM {query.RECORDS} "  # noqa: S608 - constant table and column names
    "WHERE tenant = {tenant:String} AND contract = {contract:String} "
    "AND start_ns >= {start:Int64} AND start_ns < {end:Int64}"
)


def _named(item: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """A named tuple column comes back as a dict or a tuple, depending on the client's settings."""
    if isinstance(item, dict):
        return {name: item[name] for name in names}
    return dict(zip(names, item, strict=True))


def record_from_row(row: Iterable[Any]) -> dict[str, Any]:
    record = dict(zip(RECORD_FIELDS, row, strict=True))
    record["hops"] = [_named(h, ("layer", "node", "latency_us")) for h in record["hops"]]
    record["experts"] = [_named(e, ("layer", "expert", "tokens")) for e in record["experts"]]
    record["outcome"] = orjson.loads(record["outcome"]) if record["outcome"] else None
    return record


def stored_lines(tenant: str, contract: str, start_ns: int, end_ns: int) -> dict[str, bytes]:
    """record_id → canonical bytes of each stored record of a contract in [start_ns, end_ns)."""
    rows = query.select(
        _PERIOD_SQL, {"tenant": tenant, "contract": contract, "start": start_ns, "end": end_ns}
    )
    out: dict[str, bytes] = {}
    for row in rows:
        record = record_from_row(row)
        out[record["record_id"]] = canonical_bytes_fast(record)
    return out
