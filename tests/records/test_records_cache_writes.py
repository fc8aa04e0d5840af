"""The optional ``prefix_cache_write_tokens`` (v1 and v2): present only from 1 on, absent means 0, the
canonical key position, the cross-field rule with the hits, and the reference and the compiled path
giving the same answers on every case."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest

from treemeter_records import (
    PREFIX_CACHE_WRITE_TOKENS,
    RecordError,
    canonical_bytes,
    check_record_signatures,
    decode_record,
    fast_record,
    line_signing_bytes,
    make_record,
    protocol,
    record_signing_bytes,
    sign_record,
    validate_record,
)

from .conftest import FIXED_RECORD
from .v2_example import CLAIMS, EXECUTOR_KEY, ROUTER_KEY, V1_PART

WRITES = PREFIX_CACHE_WRITE_TOKENS


def _record(**changes: Any) -> dict[str, Any]:
    """The fixed record (tokens_in 512, 256 hits) without the newline that leaves it to the reference."""
    record = copy.deepcopy(FIXED_RECORD)
    record["client_request_id"] = "req-7"
    record.update(changes)
    return record


def _problem(line: bytes) -> tuple[str, str | None] | None:
    try:
        decode_record(line)
    except RecordError as error:
        return (error.code, error.field)
    return None


@pytest.mark.parametrize(
    "changes",
    [
        {WRITES: 1},
        {WRITES: 256},  # hits + writes == tokens_in
        {"tokens_in": 2**32 - 1, "prefix_cache_hit_tokens": 0, WRITES: 2**32 - 1},
        {"prefix_cache_hit_tokens": 0, WRITES: 512},
    ],
)
def test_accepted_on_both_paths(changes: dict[str, Any]) -> None:
    record = _record(**changes)
    line = canonical_bytes(record)
    assert decode_record(line) == record
    fast = fast_record(line)
    assert fast is not None
    assert fast.prefix_cache_write_tokens == record[WRITES]


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (0, "invalid_value"),
        (2**32, "invalid_value"),
        (2**63 - 1, "invalid_value"),
        (-1, "negative_value"),
        (257, "inconsistent_totals"),  # 256 hits + 257 > 512
        (True, "wrong_type"),
        (False, "wrong_type"),
        (1.0, "wrong_type"),
        ("1", "wrong_type"),
        (None, "wrong_type"),
        ([1], "wrong_type"),
    ],
)
def test_refused_on_both_paths(value: Any, code: str) -> None:
    record = _record(**{WRITES: value})
    line = json.dumps(
        record, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()  # floats too
    assert _problem(line) == (code, WRITES)
    assert fast_record(line) is None
    with pytest.raises(RecordError) as info:
        validate_record(record)
    assert (info.value.code, info.value.field) == (code, WRITES)


def test_zero_is_refused_with_its_reason() -> None:
    with pytest.raises(RecordError) as info:
        validate_record(_record(**{WRITES: 0}))
    assert "present only when at least 1" in info.value.message


def test_the_hits_alone_still_name_their_own_field() -> None:
    with pytest.raises(RecordError) as info:
        validate_record(_record(prefix_cache_hit_tokens=513, **{WRITES: 1}))
    assert (info.value.code, info.value.field) == ("inconsistent_totals", "prefix_cache_hit_tokens")


def test_canonical_key_position() -> None:
    line = canonical_bytes(_record(**{WRITES: 7}))
    assert b'"prefix_cache_hit_tokens":256,"prefix_cache_write_tokens":7,"record_id":' in line
    fast = fast_record(line)
    assert fast is not None
    assert msgspec.json.encode(fast) == line  # the Struct declares it in canonical order
    unsorted = line.replace(b',"prefix_cache_write_tokens":7', b"").replace(
        b'"agent_id"', b'"prefix_cache_write_tokens":7,"agent_id"'
    )
    assert _problem(unsorted) == ("non_canonical", None)
    assert fast_record(unsorted) is None


def test_absent_means_zero_and_stays_absent() -> None:
    line = canonical_bytes(_record())
    fast = fast_record(line)
    assert fast is not None
    assert fast.prefix_cache_write_tokens == 0
    assert msgspec.json.encode(fast) == line
    assert WRITES.encode() not in line


def test_key_set_errors_come_first() -> None:
    record = _record(**{WRITES: 1, "price": "1.00"})
    with pytest.raises(RecordError) as info:
        validate_record(record)
    assert (info.value.code, info.value.field) == ("unknown_field", "price")
    record = _record(**{WRITES: 1})
    del record["tokens_out"]
    with pytest.raises(RecordError) as info:
        validate_record(record)
    assert (info.value.code, info.value.field) == ("missing_field", "tokens_out")


def test_make_record_drops_zero_and_keeps_the_rest() -> None:
    fields = {k: v for k, v in FIXED_RECORD.items() if k != "v"}
    assert make_record(**fields, prefix_cache_write_tokens=0) == FIXED_RECORD
    assert make_record(**fields, prefix_cache_write_tokens=5)[WRITES] == 5
    with pytest.raises(RecordError) as info:
        make_record(**fields, prefix_cache_write_tokens=False)  # a bool is no 0
    assert (info.value.code, info.value.field) == ("wrong_type", WRITES)


def test_v2_record_with_cache_writes() -> None:
    claims = {**CLAIMS, "path": list(CLAIMS["path"]), "preheat": [list(pair) for pair in CLAIMS["preheat"]]}
    decision = protocol.sign_decision(ROUTER_KEY, claims)
    v1 = {**V1_PART, "hops": [dict(h) for h in V1_PART["hops"]], "prefix_cache_hit_tokens": 32, WRITES: 32}
    record = sign_record(v1, decision, EXECUTOR_KEY)
    line = canonical_bytes(record)
    assert decode_record(line) == record
    assert fast_record(line) is not None
    assert line_signing_bytes(line) == record_signing_bytes(record)
    check_record_signatures(
        line_signing_bytes(line),
        record["executor_sig"],
        record["decision"],
        EXECUTOR_KEY.public_key(),
        ROUTER_KEY.public_key(),
    )
    over = {**v1, WRITES: 33}  # 32 + 33 > 64
    with pytest.raises(RecordError) as info:
        sign_record(over, decision, EXECUTOR_KEY)
    assert (info.value.code, info.value.field) == ("inconsistent_totals", WRITES)
