"""The compiled fast path (treemeter_records.wire) against the reference definition (validation).

Differential: for valid records and for lines mutated every way the format can be broken (a field set
to any JSON value, floats, bools, integers at and past each bound, text with control and unprintable
characters, keys dropped or added, bytes inserted or changed, other encodings), the fast path accepts a
line only when the reference does, and the batch readers give the same valid lines, the same problems
(seq, field, rule) and the same batch errors.
"""

from __future__ import annotations

import copy
import json
from typing import Any, get_args, get_type_hints

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.records.conftest import FIXED_RECORD, BodyMaker
from tests.records.strategies import JSON_VALUES, TEXT, records
from treemeter_records import (
    BatchError,
    RecordError,
    canonical_bytes,
    decode_record,
    fast_record,
    parse_batch,
    read_batch_records,
    validate_batch_records,
)
from treemeter_records.validation import HOP_LAYERS, STATUSES
from treemeter_records.wire import WireHop, WireRecord

SCALARS = ("seq", "record_id", "agent_id", "tenant", "contract", "package", "start_ns", "end_ns")
BOUNDS = (-(2**63) - 1, -(2**63), -(2**31), -1, 0, 1, 65535, 65536, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63)
AWKWARD_TEXT = ("", "\t", "\n", "\x00", "\x1f", "\x7f", "\u2028", "\u00ad", "é", "A", "a" * 65, "a" * 129)
VALUES: st.SearchStrategy[Any] = (
    JSON_VALUES
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(BOUNDS)
    | st.sampled_from(AWKWARD_TEXT)
    | st.booleans()
    | st.lists(JSON_VALUES, max_size=3)
)
# The optional prefix_cache_write_tokens too: set to any value, or dropped where a record has it.
FIELDS = (*FIXED_RECORD, "prefix_cache_write_tokens")


def _reference(line: bytes) -> tuple[str, str | None, str] | None:
    try:
        decode_record(line)
    except RecordError as error:
        return (error.code, error.field, error.message)
    return None


def _agree(line: bytes) -> None:
    problem = _reference(line)
    fast = fast_record(line)
    if fast is not None:
        assert problem is None, (line, problem)
        record = orjson.loads(line)
        assert tuple(getattr(fast, name) for name in SCALARS) == tuple(record[name] for name in SCALARS)


def _dumps(value: Any, style: int) -> bytes:
    if style == 0:
        return canonical_bytes(value)
    if style == 1:
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()  # ASCII escapes
    if style == 2:
        return orjson.dumps(value)  # keys unsorted
    return json.dumps(value, sort_keys=True).encode()  # whitespace


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    record: dict[str, Any] = draw(records())
    kind = draw(st.sampled_from(["set", "drop", "extra", "hop", "expert", "swap", "bytes", "encode"]))
    if kind == "set":
        record[draw(st.sampled_from(FIELDS))] = draw(VALUES)
    elif kind == "drop":
        record.pop(draw(st.sampled_from(FIELDS)), None)
    elif kind == "extra":
        record[draw(TEXT)] = draw(VALUES)
    elif kind == "hop":
        hop = record["hops"][0]
        hop[draw(st.sampled_from(["layer", "node", "latency_us", "extra"]))] = draw(VALUES)
    elif kind == "expert" and record["experts"]:
        expert = record["experts"][-1]
        expert[draw(st.sampled_from(["layer", "expert", "tokens", "extra"]))] = draw(VALUES)
    elif kind == "swap" and len(record["experts"]) > 1:
        record["experts"][0], record["experts"][1] = record["experts"][1], record["experts"][0]
    if kind == "bytes":
        line = canonical_bytes(record)
        at = draw(st.integers(0, len(line)))
        return line[:at] + draw(st.binary(max_size=3)) + line[at + draw(st.integers(0, 2)) :]
    style = draw(st.integers(0, 3)) if kind == "encode" else 0
    try:
        return _dumps(record, style)
    except (ValueError, TypeError):  # a value the encoding refuses (e.g. an int past 64 bits for orjson)
        return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(records())
def test_valid_records_agree(record: dict[str, Any]) -> None:
    _agree(canonical_bytes(record))


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_lines_agree(line: bytes) -> None:
    _agree(line)


def test_the_structs_enums_are_the_formats() -> None:
    """A status or hop layer added to the format must reach the fast path too (else it is only slow)."""
    assert set(get_args(get_type_hints(WireRecord)["status"])) == STATUSES
    assert set(get_args(get_type_hints(WireHop)["layer"])) == HOP_LAYERS


def test_fast_path_takes_ordinary_records() -> None:
    record = copy.deepcopy(FIXED_RECORD)
    record["client_request_id"] = "req-Ω-7é"  # a newline would leave the line to the reference
    assert fast_record(canonical_bytes(record)) is not None
    assert fast_record(canonical_bytes(FIXED_RECORD)) is None
    assert _reference(canonical_bytes(FIXED_RECORD)) is None


def _outcome(raw: bytes) -> bytes:
    record = copy.deepcopy(FIXED_RECORD)
    record["client_request_id"] = "r"
    record["outcome"] = None
    return canonical_bytes(record).replace(b'"outcome":null', b'"outcome":' + raw)


@pytest.mark.parametrize(
    "raw",
    [b'{"a":1.5}', b'{"b":1,"a":2}', b'{"a":"\\u00e9"}', b'{"a":1,"a":1}', b"[1]", b'"x"', b"true"],
)
def test_outcome_shapes_agree(raw: bytes) -> None:
    line = _outcome(raw)
    assert _reference(line) is not None
    assert fast_record(line) is None


def test_deep_nesting_is_left_to_the_reference() -> None:
    line = _outcome(b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert fast_record(line) is None
    assert _reference(line) is not None
    assert fast_record(b"[" * 100_000) is None


def _batch_results(body: bytes, reader: Any) -> Any:
    try:
        result = reader(parse_batch(body, 100))
    except BatchError as error:
        return ("batch", error.code, error.message)
    seqs = [seq for seq, _ in result.valid]
    return (seqs, result.valid_index, result.problems)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(mutated(), min_size=1, max_size=6), st.data())
def test_batch_readers_agree(make_body: BodyMaker, lines: list[bytes], data: st.DataObject) -> None:
    lines = [line.replace(b"\n", b"") or b"x" for line in lines]
    seqs = sorted(data.draw(st.sets(st.integers(0, 50), min_size=len(lines), max_size=len(lines))))
    fixed = []
    for line, seq in zip(lines, seqs, strict=True):
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            fixed.append(line)
            continue
        if type(value) is dict and data.draw(st.booleans()):  # most lines in order, of the batch's agent
            value["seq"], value["agent_id"] = seq, "agent-eu1.gpu-07"
            line = _dumps(value, 0) if _encodable(value) else line
        fixed.append(line)
    body = make_body(fixed, {"first_seq": seqs[0], "last_seq": seqs[-1]})
    assert _batch_results(body, read_batch_records) == _batch_results(body, validate_batch_records)


def _encodable(value: Any) -> bool:
    try:
        canonical_bytes(value)
    except ValueError:
        return False
    return True
