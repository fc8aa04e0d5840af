"""Canonical encoding: the stdlib definition, the orjson fast path, and their equivalence."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treemeter_records import (
    CanonicalEncodingError,
    canonical_bytes,
    canonical_bytes_fast,
    decode_record,
    matches_canonical,
    validate_record,
)

from .strategies import CHARS, JSON_VALUES, records


def _definition(obj: Any) -> bytes:
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def test_every_code_point_escapes_identically() -> None:
    """String escaping is per character, so checking every non-surrogate code point (in chunks)
    proves orjson and the stdlib definition agree on all strings."""
    code_points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for i in range(0, len(code_points), 2048):
        chunk = "".join(map(chr, code_points[i : i + 2048]))
        assert orjson.dumps(chunk) == _definition(chunk), hex(code_points[i])
        # The same text as an object key, with the key sorting in play.
        obj = {chunk: 1, chunk[:7]: [chunk[-3:]]}
        assert canonical_bytes_fast(obj) == canonical_bytes(obj), hex(code_points[i])


def test_control_characters_and_specials() -> None:
    text = '\x00\x01\x08\t\n\x0b\x0c\r\x1f\x7f\u2028\u2029"\\/é\U0001f600'
    expected = (
        b'"\\u0000\\u0001\\b\\t\\n\\u000b\\f\\r\\u001f'
        b'\x7f\xe2\x80\xa8\xe2\x80\xa9\\"\\\\/\xc3\xa9\xf0\x9f\x98\x80"'
    )
    assert canonical_bytes(text) == expected
    assert canonical_bytes_fast(text) == expected


def test_keys_sort_by_code_point_not_utf16() -> None:
    # U+E000 < U+1F600 by code point (and UTF-8 bytes) but not in UTF-16 code units (JCS).
    obj = {"\U0001f600": 1, "\ue000": 2, "é": 3, "a": 4, "Z": 5, "": 6}
    expected = '{"":6,"Z":5,"a":4,"é":3,"\ue000":2,"\U0001f600":1}'.encode()
    assert canonical_bytes(obj) == expected
    assert canonical_bytes_fast(obj) == expected


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (1.5, "float at $"),
        ({"a": [1, {"b": 2.0}]}, "float at $.a[1].b"),
        ({"x": math.nan}, "float"),
        ({"x": math.inf}, "float"),
        ({1: "a"}, "non-string key"),
        ({"big": 2**63}, "64-bit"),
        ({"small": -(2**63) - 1}, "64-bit"),
        ({"s": {1, 2}}, "unsupported type set"),
        ({"b": b"bytes"}, "unsupported type bytes"),
        ("\ud800", "lone surrogate"),
    ],
)
def test_canonical_bytes_refuses(value: Any, needle: str) -> None:
    with pytest.raises(CanonicalEncodingError) as info:
        canonical_bytes(value)
    assert needle in str(info.value)


def test_int_range_edges_and_bools() -> None:
    assert canonical_bytes([-(2**63), 2**63 - 1, True, False, None]) == (
        b"[-9223372036854775808,9223372036854775807,true,false,null]"
    )


def test_matches_canonical_rejects_variants() -> None:
    obj = {"b": 1, "a": "é"}
    assert matches_canonical('{"a":"é","b":1}'.encode(), obj)
    assert not matches_canonical(b'{"b":1,"a":"\xc3\xa9"}', obj)  # key order
    assert not matches_canonical(b'{"a":"\\u00e9","b":1}', obj)  # needless escape
    assert not matches_canonical('{"a": "é", "b": 1}'.encode(), obj)  # whitespace


@settings(max_examples=300)
@given(records())
def test_record_orjson_equals_definition_and_round_trips(rec: dict[str, Any]) -> None:
    validate_record(rec)
    line = canonical_bytes(rec)
    assert line == _definition(rec)
    assert canonical_bytes_fast(rec) == line
    assert decode_record(line) == rec
    assert json.loads(line) == rec


@settings(max_examples=300)
@given(JSON_VALUES)
def test_json_values_orjson_equals_definition(value: Any) -> None:
    assert canonical_bytes_fast(value) == canonical_bytes(value) == _definition(value)
    assert orjson.loads(canonical_bytes(value)) == value


@given(st.text(CHARS))
def test_strings_round_trip(text: str) -> None:
    assert orjson.loads(canonical_bytes_fast(text)) == text == json.loads(canonical_bytes(text))
