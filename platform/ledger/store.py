"""Records as stored in ClickHouse, turned back into their canonical bytes (what the log hashed)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson

from clickhouse_store import query
from clickhouse_store.schema import RECORD_FIELDS
from contracts.dimensions import AGGREGATES, quantity_from_aggregate
from treemeter_records import canonical_bytes_fast

_COLUMNS = ", ".join("toString(record_id)" if name == "record_id" else name for name in RECORD_FIELDS)
_PERIOD_SQL = (
    f"SELECT {_COLUMNS} FROM {query.RECORDS} "  # noqa: S608 - constant table and column names
    "WHERE tenant = {tenant:String} AND contract = {contract:String} "
    "AND start_ns >= {start:Int64} AND start_ns < {end:Int64}"
)


@dataclass(frozen=True)
class Window:
    """Records that started in [start_ns, end_ns) with this status."""

    start_ns: int
    end_ns: int
    status: str


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


def matching_records(
    tenant: str, contract: str, period: tuple[int, int], record_ids: list[str] | None, window: Window | None
) -> dict[str, int]:
    """record_id → start_ns of the contract's stored records in the period that are named in
    ``record_ids`` or, with a ``window``, start in it with its status."""
    params: dict[str, Any] = {"tenant": tenant, "contract": contract, "start": period[0], "end": period[1]}
    if record_ids is not None:
        condition = "toString(record_id) IN {ids:Array(String)}"
        params["ids"] = record_ids
    elif window is not None:
        condition = "start_ns >= {wstart:Int64} AND start_ns < {wend:Int64} AND status = {status:String}"
        params.update(wstart=window.start_ns, wend=window.end_ns, status=window.status)
    else:
        raise ValueError("name the records or a window")
    rows = query.select(
        f"SELECT toString(record_id), start_ns FROM {query.RECORDS} "  # noqa: S608 - constant SQL
        "WHERE tenant = {tenant:String} AND contract = {contract:String} "
        f"AND start_ns >= {{start:Int64}} AND start_ns < {{end:Int64}} AND {condition}",
        params,
    )
    return {str(record_id): int(start_ns) for record_id, start_ns in rows}


def billed_usage(tenant: str, contract: str, record_ids: list[str]) -> dict[str, Decimal]:
    """What these records add to each built-in dimension, as billing measures it (only `ok` is billed)."""
    if not record_ids:
        return {dimension: Decimal(0) for dimension in AGGREGATES}
    columns = ", ".join(f"{expression} FILTER (WHERE status = 'ok')" for expression in AGGREGATES.values())
    [row] = query.select(
        f"SELECT {columns} FROM {query.RECORDS} "  # noqa: S608 - constant SQL
        "WHERE tenant = {tenant:String} AND contract = {contract:String} "
        "AND toString(record_id) IN {ids:Array(String)}",
        {"tenant": tenant, "contract": contract, "ids": record_ids},
    )
    return {d: quantity_from_aggregate(d, int(v or 0)) for d, v in zip(AGGREGATES, row, strict=True)}
