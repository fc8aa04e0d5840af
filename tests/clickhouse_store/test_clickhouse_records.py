"""Usage records: JSONEachRow inserts, derived columns, write dedup (tokens) and read dedup (RECORDS)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clickhouse_store import query
from clickhouse_store.queries.records import insert_record_lines, record_of, records_page, stored_lines
from clickhouse_store.query import RECORDS
from clickhouse_store.schema import RECORD_FIELDS
from tests.records.strategies import records
from treemeter_records import canonical_bytes, leaf_hash
from treemeter_records import make_record as build_record

Record = dict[str, Any]
MakeRecord = Callable[..., Record]
AsValues = Callable[[Record], Record]


def lines(*records: Record) -> bytes:
    return b"".join(json.dumps(record).encode() + b"\n" for record in records)


def utc(value: datetime) -> datetime:
    """clickhouse-connect returns naive UTC datetimes by default (tz_mode "naive_utc")."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def raw_count() -> int:
    ((count,),) = query.select("SELECT count() FROM usage_records")
    return int(count)


def test_json_lines_insert_a_full_record(ch: None, make_record: MakeRecord) -> None:
    with_outcome = make_record()
    without_outcome = make_record(outcome=None, hops=[], status="error")
    query.insert_json_lines("usage_records", lines(with_outcome, without_outcome))

    columns = ", ".join(RECORD_FIELDS)
    rows = query.select_dicts(
        f"SELECT {columns}, toUnixTimestamp64Nano(start_time) AS start_time_ns, start_time, "
        "l1_latency_us, l2_latency_us, l3_latency_us, ingested_at "
        "FROM usage_records WHERE record_id = {id:UUID}",
        {"id": with_outcome["record_id"]},
    )
    assert len(rows) == 1
    row = rows[0]
    for field in ("v", "agent_id", "seq", "tenant", "contract", "package", "client_request_id", "model_id"):
        assert row[field] == with_outcome[field], field
    for field in (
        "weights_sha3",
        "start_ns",
        "end_ns",
        "clock_drift_us",
        "tokens_in",
        "tokens_out",
        "sla_class",
    ):
        assert row[field] == with_outcome[field], field
    for field in ("distinct_experts", "expert_tokens", "prefix_cache_hit_tokens", "expert_cache_hits"):
        assert row[field] == with_outcome[field], field
    assert row["expert_cache_misses"] == 2
    assert row["status"] == "ok"
    assert str(row["record_id"]) == with_outcome["record_id"]
    assert row["hops"] == with_outcome["hops"]  # named tuples read back as dicts
    assert row["experts"] == with_outcome["experts"]
    assert json.loads(row["outcome"]) == with_outcome["outcome"]

    assert row["l1_latency_us"] == 850
    assert row["l2_latency_us"] == 1200 + 300
    assert row["l3_latency_us"] == 640_000
    assert row["start_time_ns"] == with_outcome["start_ns"]
    assert utc(row["start_time"]) == datetime(2025, 12, 2, 10, 6, 40, 123456, tzinfo=UTC)
    assert abs(datetime.now(UTC) - utc(row["ingested_at"])) < timedelta(minutes=5)

    ((outcome, l1, l2, l3, status),) = query.select(
        "SELECT outcome, l1_latency_us, l2_latency_us, l3_latency_us, status FROM usage_records "
        "WHERE record_id = {id:UUID}",
        {"id": without_outcome["record_id"]},
    )
    assert (outcome, l1, l2, l3, status) == ("", 0, 0, 0, "error")


def test_insert_rows_fills_the_same_derived_columns(
    ch: None, make_record: MakeRecord, as_values: AsValues
) -> None:
    hops = [{"layer": "l1", "node": "a", "latency_us": 7}, {"layer": "L1", "node": "b", "latency_us": 5}]
    record = make_record(hops=hops)
    values = as_values(record)
    query.insert_rows("usage_records", list(values), [list(values.values())])
    columns = [[value] for value in values.values()]
    other = make_record()
    columns[list(values).index("record_id")] = [other["record_id"]]
    query.insert_rows("usage_records", list(values), columns, column_oriented=True)
    rows = query.select(
        "SELECT l1_latency_us, l2_latency_us, toUnixTimestamp64Nano(start_time) FROM usage_records"
    )
    assert rows == [(12, 0, record["start_ns"])] * 2


def test_dedup_token_drops_a_retried_insert(ch: None, make_record: MakeRecord, as_values: AsValues) -> None:
    batch = lines(make_record(seq=1), make_record(seq=2), make_record(seq=3))
    query.insert_json_lines("usage_records", batch, dedup_token="agent-fra-07:1-3")
    query.insert_json_lines("usage_records", batch, dedup_token="agent-fra-07:1-3")  # the retry
    assert raw_count() == 3

    values = as_values(make_record(seq=4))
    for _ in range(2):
        query.insert_rows(
            "usage_records", list(values), [list(values.values())], dedup_token="agent-fra-07:4-4"
        )
    assert raw_count() == 4


def test_records_counts_a_copy_once(ch: None, make_record: MakeRecord) -> None:
    """Two inserts of the same record under different tokens get past write dedup; RECORDS reads one."""
    record = make_record(tokens_in=512)
    other = make_record(tokens_in=100, contract="ctr-2026-0002")
    query.command("SYSTEM STOP MERGES usage_records")  # a background merge would remove the copy early
    try:
        query.insert_json_lines("usage_records", lines(record, other), dedup_token="batch-1")
        query.insert_json_lines("usage_records", lines(record), dedup_token="batch-2")
        assert raw_count() == 3  # no merge has happened: the copy is stored
    finally:
        query.command("SYSTEM START MERGES usage_records")
    assert query.select(
        "SELECT count(), sum(tokens_in) FROM usage_records WHERE record_id = {id:UUID}",
        {"id": record["record_id"]},
    ) == [(2, 1024)]
    totals = query.select(
        f"SELECT count(), sum(tokens_in) FROM {RECORDS} WHERE tenant = {{tenant:String}}",
        {"tenant": "acme"},
    )
    assert totals == [(2, 612)]
    per_contract = query.select(
        f"SELECT contract, count(), sum(tokens_in) FROM {RECORDS} GROUP BY contract ORDER BY contract"
    )
    assert per_contract == [("ctr-2026-0001", 1, 512), ("ctr-2026-0002", 1, 100)]


def _valid(make_record: MakeRecord, seq: int, **fields: Any) -> Record:
    """A record that passes validation (the fixture's has a float in its outcome and loose totals)."""
    base = make_record(seq=seq, record_id=f"0193d7a2-5f00-7c3e-9a41-{seq:012x}", outcome={"ref": "case-9"})
    for derived in ("v", "distinct_experts", "expert_tokens"):
        del base[derived]
    return build_record(**base, **fields)


def test_cache_writes_read_back_byte_identical(ch: None, make_record: MakeRecord) -> None:
    """The optional field round-trips: present (at least 1) it reads back as sent, absent it stays absent
    (the column holds 0), so each record's canonical bytes, and its leaf hash, are the agent's."""
    written = _valid(make_record, 1, prefix_cache_write_tokens=128)
    plain = _valid(make_record, 2, prefix_cache_write_tokens=0)
    assert "prefix_cache_write_tokens" not in plain
    sent = [canonical_bytes(written), canonical_bytes(plain)]
    insert_record_lines(b"\n".join(sent) + b"\n", dedup_token="cache-writes")

    stored = query.select("SELECT seq, prefix_cache_write_tokens FROM usage_records ORDER BY seq")
    assert stored == [(1, 128), (2, 0)]
    for record, line in zip((written, plain), sent, strict=True):
        read = record_of(record["record_id"], "acme")
        assert read == record
        assert read is not None and canonical_bytes(read) == line
        assert leaf_hash(canonical_bytes(read)) == leaf_hash(line)
    period = stored_lines("acme", "ctr-2026-0001", 0, 2**63 - 1)
    assert sorted(period.values()) == sorted(sent)
    total, page = records_page("acme", "ctr-2026-0001", 0, 2**63 - 1, 10, 0)
    assert total == 2 and [r.get("prefix_cache_write_tokens") for r in page] == [128, None]


def test_stored_lines_are_the_sent_lines_whichever_way_they_are_read(ch: None) -> None:
    """Plain records come as the engine writes them, the others are rebuilt: each is the agent's line
    byte for byte. Hypothesis draws records of every shape (text with `/`, quotes, backslashes, control
    characters, U+2028 and non-ASCII, outcomes, cache writes, extreme integers) into one contract."""
    seen: list[int] = []

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(records(), min_size=1, max_size=12, unique_by=lambda r: r["record_id"]))
    def check(drawn: list[Record]) -> None:
        query.command("TRUNCATE TABLE usage_records")
        sent = {}
        for k, record in enumerate(drawn):
            record.update(tenant="acme", contract="ctr-1", start_ns=1 + k, end_ns=1 + k)
            sent[record["record_id"]] = canonical_bytes(record)
        insert_record_lines(b"\n".join(sent.values()) + b"\n", dedup_token=f"lines-{len(seen)}")
        seen.append(len(sent))
        assert stored_lines("acme", "ctr-1", 0, 2**63 - 1) == sent

    check()
    plain = build_record(
        agent_id="a", seq=1, tenant="acme", contract="ctr-1", package="p", sla_class="s",
        client_request_id='say "hi" / \\ back', model_id="m/x", weights_sha3="ab" * 32, start_ns=5,
        end_ns=6, clock_drift_us=-(2**31) + 1, tokens_in=2**32 - 1, tokens_out=0,
        hops=[{"layer": "L3", "node": "gpu/1", "latency_us": 2**32 - 1}], experts=[],
        prefix_cache_hit_tokens=0, expert_cache_hits=0, expert_cache_misses=0, status="ok",
    )  # fmt: skip
    query.command("TRUNCATE TABLE usage_records")
    insert_record_lines(canonical_bytes(plain) + b"\n", dedup_token="plain")
    assert stored_lines("acme", "ctr-1", 0, 2**63 - 1) == {plain["record_id"]: canonical_bytes(plain)}
