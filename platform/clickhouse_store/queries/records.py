"""The usage records themselves: ingest's insert, the records of a contract read back (for proofs
and exports), and the demo's count."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import orjson

from treemeter_records import canonical_bytes_fast

from .. import query
from ..schema import OPTIONAL_FIELDS, RECORD_FIELDS, SANDBOX_RECORDS, SIGNED_FIELDS, USAGE_RECORDS

_FIELDS = (*RECORD_FIELDS, *SIGNED_FIELDS, *OPTIONAL_FIELDS)
_COLUMNS = ", ".join("toString(record_id)" if name == "record_id" else name for name in _FIELDS)
_PERIOD = (
    "WHERE tenant = {tenant:String} AND contract = {contract:String} "
    "AND start_ns >= {start:Int64} AND start_ns < {end:Int64}"
)
_PERIOD_SQL = f"SELECT {_COLUMNS} FROM {query.RECORDS} {_PERIOD}"  # noqa: S608 - constant names


def insert_record_lines(body: bytes, dedup_token: str, *, sandbox: bool = False) -> None:
    """Insert a batch's accepted records, JSON lines of usage record format v1 or v2, into usage_records
    (a sandbox's: into sandbox_records). A repeat with the same `dedup_token` is dropped by the engine."""
    query.insert_json_lines(SANDBOX_RECORDS if sandbox else USAGE_RECORDS, body, dedup_token=dedup_token)


def _named(item: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """A named tuple column comes back as a dict or a tuple, depending on the client's settings."""
    if isinstance(item, dict):
        return {name: item[name] for name in names}
    return dict(zip(names, item, strict=True))


def _record_from_row(row: Iterable[Any]) -> dict[str, Any]:
    record = dict(zip(_FIELDS, row, strict=True))
    record["hops"] = [_named(h, ("layer", "node", "latency_us")) for h in record["hops"]]
    record["experts"] = [_named(e, ("layer", "expert", "tokens")) for e in record["experts"]]
    return _as_sent(record)


def _as_sent(record: dict[str, Any]) -> dict[str, Any]:
    """A stored row's columns as the record its agent sent: v2's signed parts and the outcome parsed
    from their JSON text (the signed parts absent from a v1 record), an optional field absent at 0."""
    for name in SIGNED_FIELDS:
        text = record.pop(name)
        if record["v"] != 1:
            record[name] = orjson.loads(text)
    record["outcome"] = orjson.loads(record["outcome"]) if record["outcome"] else None
    for name in OPTIONAL_FIELDS:  # present in a record only from 1 on (absent means 0)
        if not record[name]:
            del record[name]
    return record


# The period's other records as the engine's JSON rows: named tuples as objects, keys as the record's.
_JSON_COLUMNS = ", ".join("toString(record_id) AS record_id" if n == "record_id" else n for n in _FIELDS)


# A plain record: format v1, no outcome, no cache writes, its free text printable ASCII. The engine
# writes it as its canonical line itself (`stored_lines`): the columns in canonical key order,
# each nested tuple's elements named in key order, the outcome null, 64-bit integers as numbers and `/`
# not escaped; in printable ASCII the engine escapes only `"` and `\`, as the canonical encoding does.
_ASCII = "match({}, '^[ -~]*$')"
_PLAIN = (
    "v = 1 AND outcome = '' AND prefix_cache_write_tokens = 0 AND "
    + " AND ".join(_ASCII.format(column) for column in ("client_request_id", "model_id"))
    + " AND arrayAll(h -> "
    + _ASCII.format("h.node")
    + ", hops)"
)
_CANONICAL_V1 = (
    "agent_id, client_request_id, clock_drift_us, contract, distinct_experts, end_ns, expert_cache_hits, "
    "expert_cache_misses, expert_tokens, "
    "arrayMap(e -> CAST((e.expert, e.layer, e.tokens), 'Tuple(expert UInt16, layer UInt16, tokens UInt32)'), "
    "experts) AS experts, "
    "arrayMap(h -> CAST((h.latency_us, toString(h.layer), h.node), "
    "'Tuple(latency_us UInt32, layer String, node String)'), hops) AS hops, "
    "model_id, NULL AS outcome, package, prefix_cache_hit_tokens, toString(record_id) AS record_id, seq, "
    "sla_class, start_ns, status, tenant, tokens_in, tokens_out, v, weights_sha3"
)
_PLAIN_LINES_SQL = f"SELECT {_CANONICAL_V1} FROM (SELECT * FROM {query.RECORDS} {_PERIOD} AND {_PLAIN})"  # noqa: S608
_OTHER_JSON_SQL = f"SELECT {_JSON_COLUMNS} FROM {query.RECORDS} {_PERIOD} AND NOT ({_PLAIN})"  # noqa: S608
_RECORD_ID = b'"record_id":"'


def stored_lines(tenant: str, contract: str, start_ns: int, end_ns: int) -> dict[str, bytes]:
    """record_id → canonical bytes of each stored record of a contract in [start_ns, end_ns) (FINAL:
    each once). Plain records (the many) come as the engine writes them, the others are rebuilt from
    their JSON rows: a million-record export makes no Python object for most of its records."""
    params = {"tenant": tenant, "contract": contract, "start": start_ns, "end": end_ns}
    out: dict[str, bytes] = {}
    for line in query.select_json_rows(_PLAIN_LINES_SQL, params).splitlines():
        at = line.index(_RECORD_ID) + len(_RECORD_ID)
        out[line[at : at + 36].decode()] = line
    for row in query.select_json_rows(_OTHER_JSON_SQL, params).splitlines():
        record = _as_sent(orjson.loads(row))
        out[record["record_id"]] = canonical_bytes_fast(record)
    return out


def layer_latencies(start: datetime, end: datetime, agents: Sequence[str] = ()) -> dict[str, tuple[int, int]]:
    """Per tree layer, the p50 and p99 (µs) of the served records' time on it, start_time in [start, end),
    of these agents' records (all agents' when empty)."""
    columns = ", ".join(
        f"toUInt64(quantileExact(0.5)({name}_latency_us)), toUInt64(quantileExact(0.99)({name}_latency_us))"
        for name in ("l1", "l2", "l3")
    )
    [row] = query.select(
        f"SELECT {columns} FROM {query.RECORDS} WHERE status = 'ok' "  # noqa: S608 - constant names
        "AND start_time >= {start:DateTime64(9, 'UTC')} AND start_time < {end:DateTime64(9, 'UTC')} "
        "AND (empty({agents:Array(String)}) OR has({agents:Array(String)}, agent_id))",
        {"start": start, "end": end, "agents": list(agents)},
    )
    return {layer: (int(row[2 * i]), int(row[2 * i + 1])) for i, layer in enumerate(("L1", "L2", "L3"))}


def served_spans(start: datetime, end: datetime, agents: Sequence[str]) -> tuple[int, int, int]:
    """Of these agents' served records with start_time in [start, end), the p50 (µs) of: arrival to
    answer (end − start), the L1 hops, and the router's own part of them (its decision's ``l1_in_us``:
    arrival at the router to the signed decision; 0 on records no router decided)."""
    [row] = query.select(
        "SELECT toUInt64(quantileExact(0.5)(intDiv(end_ns - start_ns, 1000))), "  # noqa: S608
        "toUInt64(quantileExact(0.5)(l1_latency_us)), "
        "toUInt64(quantileExact(0.5)(JSONExtractUInt(decision, 'claims', 'l1_in_us'))) "
        f"FROM {query.RECORDS} WHERE status = 'ok' "
        "AND start_time >= {start:DateTime64(9, 'UTC')} AND start_time < {end:DateTime64(9, 'UTC')} "
        "AND has({agents:Array(String)}, agent_id)",
        {"start": start, "end": end, "agents": list(agents)},
    )
    return int(row[0]), int(row[1]), int(row[2])


def expert_cache_counts(start: datetime, end: datetime, agents: Sequence[str]) -> tuple[int, int]:
    """Of these agents' served records with start_time in [start, end): their expert-cache hits and
    misses, summed."""
    [row] = query.select(
        "SELECT sum(expert_cache_hits), sum(expert_cache_misses) "  # noqa: S608 - constant table name
        f"FROM {query.RECORDS} WHERE status = 'ok' "
        "AND start_time >= {start:DateTime64(9, 'UTC')} AND start_time < {end:DateTime64(9, 'UTC')} "
        "AND has({agents:Array(String)}, agent_id)",
        {"start": start, "end": end, "agents": list(agents)},
    )
    return int(row[0]), int(row[1])


def count_records(contract: str, start: datetime, end: datetime) -> tuple[int, int]:
    """(records, served records) of a contract with start_time in [start, end)."""
    records, served = query.select(
        f"SELECT count(), countIf(status = 'ok') FROM {query.RECORDS} "  # noqa: S608 - constant table name
        "WHERE contract = {contract:String} AND start_time >= {start:DateTime64(9, 'UTC')} "
        "AND start_time < {end:DateTime64(9, 'UTC')}",
        {"contract": contract, "start": start, "end": end},
    )[0]
    return records, served


_PAGE_SQL = f"{_PERIOD_SQL} ORDER BY start_ns, record_id LIMIT {{limit:UInt32}} OFFSET {{offset:UInt64}}"
_ONE_SQL = f"SELECT {_COLUMNS} FROM {query.RECORDS} WHERE record_id = {{record_id:UUID}}"  # noqa: S608


def records_page(
    tenant: str, contract: str, start_ns: int, end_ns: int, limit: int, offset: int
) -> tuple[int, list[dict[str, Any]]]:
    """How many records the contract has with start_ns in [start_ns, end_ns), and one page of them in
    time order (record format v1/v2 dicts)."""
    params = {"tenant": tenant, "contract": contract, "start": start_ns, "end": end_ns}
    [(total,)] = query.select(f"SELECT count() FROM {query.RECORDS} {_PERIOD}", params)  # noqa: S608
    rows = query.select(_PAGE_SQL, {**params, "limit": limit, "offset": offset})
    return int(total), [_record_from_row(row) for row in rows]


def record_of(record_id: str, tenant: str | None) -> dict[str, Any] | None:
    """One stored record by id; `tenant`: only that tenant's (None: any, for staff)."""
    if tenant is None:
        rows = query.select(f"{_ONE_SQL} LIMIT 1", {"record_id": record_id})
    else:
        rows = query.select(
            f"{_ONE_SQL} AND tenant = {{tenant:String}} LIMIT 1", {"record_id": record_id, "tenant": tenant}
        )
    return _record_from_row(rows[0]) if rows else None
