"""Per-record validation: one minimal failing record per reason code, and the boundaries."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from treemeter_records import (
    RECORD_ERROR_CODES,
    RECORD_FIELDS,
    RecordError,
    canonical_bytes,
    decode_record,
    make_record,
    new_record_id,
    validate_record,
)
from treemeter_records.limits import JSON_MAX_DEPTH, JSON_MAX_MEMBERS

from .conftest import FIXED_RECORD
from .test_records_v2 import V2_CODES

Mutation = Callable[[dict[str, Any]], Any]


def _encode(rec: Any) -> bytes:
    """Sorted compact JSON without the canonical type policing (floats allowed)."""
    return json.dumps(rec, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _set(field: str, value: Any) -> Mutation:
    return lambda r: r.__setitem__(field, value)


def _set_in(field: str, index: int, key: str, value: Any) -> Mutation:
    return lambda r: r[field][index].__setitem__(key, value)


CASES: list[tuple[str, Mutation, str, str | None]] = [
    # unsupported_version
    ("v3", _set("v", 3), "unsupported_version", "v"),
    ("v2 without its decision", _set("v", 2), "missing_field", "decision"),
    ("v0", _set("v", 0), "unsupported_version", "v"),
    # missing_field / unknown_field
    ("no v", lambda r: r.pop("v"), "missing_field", "v"),
    ("no outcome", lambda r: r.pop("outcome"), "missing_field", "outcome"),
    ("no hop node", lambda r: r["hops"][1].pop("node"), "missing_field", "hops[1].node"),
    ("no expert tokens", lambda r: r["experts"][0].pop("tokens"), "missing_field", "experts[0].tokens"),
    ("extra", _set("price", "1.00"), "unknown_field", "price"),
    ("extra in hop", _set_in("hops", 0, "gpu", "h200"), "unknown_field", "hops[0].gpu"),
    ("extra in expert", _set_in("experts", 2, "x", 1), "unknown_field", "experts[2].x"),
    # wrong_type
    ("v string", _set("v", "1"), "wrong_type", "v"),
    ("v bool", _set("v", True), "wrong_type", "v"),
    ("seq string", _set("seq", "42"), "wrong_type", "seq"),
    ("tokens bool", _set("tokens_in", True), "wrong_type", "tokens_in"),
    ("tokens float", _set("tokens_out", 128.0), "wrong_type", "tokens_out"),
    ("start float", _set("start_ns", 1.7e18), "wrong_type", "start_ns"),
    ("drift float", _set("clock_drift_us", -1.5), "wrong_type", "clock_drift_us"),
    ("record_id int", _set("record_id", 7), "wrong_type", "record_id"),
    ("tenant null", _set("tenant", None), "wrong_type", "tenant"),
    ("model list", _set("model_id", ["m"]), "wrong_type", "model_id"),
    ("cache writes bool", _set("prefix_cache_write_tokens", True), "wrong_type", "prefix_cache_write_tokens"),
    ("cache writes float", _set("prefix_cache_write_tokens", 5.0), "wrong_type", "prefix_cache_write_tokens"),
    (
        "cache writes string",
        _set("prefix_cache_write_tokens", "5"),
        "wrong_type",
        "prefix_cache_write_tokens",
    ),
    ("hops object", _set("hops", {"layer": "L1"}), "wrong_type", "hops"),
    ("hop not object", lambda r: r["hops"].append("L1"), "wrong_type", "hops[5]"),
    ("hop layer int", _set_in("hops", 0, "layer", 1), "wrong_type", "hops[0].layer"),
    ("experts null", _set("experts", None), "wrong_type", "experts"),
    ("expert tokens str", _set_in("experts", 1, "tokens", "340"), "wrong_type", "experts[1].tokens"),
    ("status int", _set("status", 0), "wrong_type", "status"),
    ("outcome list", _set("outcome", ["x"]), "wrong_type", "outcome"),
    ("outcome float", lambda r: r["outcome"].__setitem__("value", 2000.0), "wrong_type", "outcome.value"),
    (
        "outcome nested float",
        _set("outcome", {"a": [1, {"b": 0.5}]}),
        "wrong_type",
        "outcome.a[1].b",
    ),
    # invalid_value
    ("uuid v4", _set("record_id", str(uuid.UUID(int=0, version=4))), "invalid_value", "record_id"),
    ("uuid upper", _set("record_id", FIXED_RECORD["record_id"].upper()), "invalid_value", "record_id"),
    ("uuid variant", _set("record_id", "01936f4e-8a2b-7c3d-ce4f-5a6b7c8d9e0f"), "invalid_value", "record_id"),
    ("uuid braces", _set("record_id", "{" + FIXED_RECORD["record_id"] + "}"), "invalid_value", "record_id"),
    ("agent upper", _set("agent_id", "Agent-1"), "invalid_value", "agent_id"),
    ("agent newline", _set("agent_id", "agent\n"), "invalid_value", "agent_id"),
    ("slug too long", _set("tenant", "a" * 65), "invalid_value", "tenant"),
    ("slug leading dash", _set("contract", "-c"), "invalid_value", "contract"),
    ("slug empty", _set("package", ""), "invalid_value", "package"),
    ("sla space", _set("sla_class", "go ld"), "invalid_value", "sla_class"),
    ("request id long", _set("client_request_id", "x" * 129), "invalid_value", "client_request_id"),
    ("model empty", _set("model_id", ""), "invalid_value", "model_id"),
    ("model long", _set("model_id", "m" * 129), "invalid_value", "model_id"),
    ("weights upper", _set("weights_sha3", "A" * 64), "invalid_value", "weights_sha3"),
    ("weights short", _set("weights_sha3", "a" * 63), "invalid_value", "weights_sha3"),
    ("start zero", _set("start_ns", 0), "invalid_value", "start_ns"),
    ("end too big", _set("end_ns", 2**63), "invalid_value", "end_ns"),
    ("end before start", _set("end_ns", FIXED_RECORD["start_ns"] - 1), "invalid_value", "end_ns"),
    ("drift too big", _set("clock_drift_us", 2**31), "invalid_value", "clock_drift_us"),
    ("drift too small", _set("clock_drift_us", -(2**31)), "invalid_value", "clock_drift_us"),
    ("tokens 2**32", _set("tokens_out", 2**32), "invalid_value", "tokens_out"),
    ("seq 2**63", _set("seq", 2**63), "invalid_value", "seq"),
    ("hops empty", _set("hops", []), "invalid_value", "hops"),
    ("hop layer L4", _set_in("hops", 2, "layer", "L4"), "invalid_value", "hops[2].layer"),
    ("hop node empty", _set_in("hops", 0, "node", ""), "invalid_value", "hops[0].node"),
    ("hop node long", _set_in("hops", 0, "node", "n" * 65), "invalid_value", "hops[0].node"),
    ("latency 2**32", _set_in("hops", 0, "latency_us", 2**32), "invalid_value", "hops[0].latency_us"),
    ("expert layer", _set_in("experts", 0, "layer", 65536), "invalid_value", "experts[0].layer"),
    ("expert zero tokens", _set_in("experts", 0, "tokens", 0), "invalid_value", "experts[0].tokens"),
    ("experts unsorted", lambda r: r["experts"].reverse(), "invalid_value", "experts[1]"),
    (
        "experts duplicate",
        lambda r: r["experts"].insert(1, dict(r["experts"][0])),
        "invalid_value",
        "experts[1]",
    ),
    ("status unknown", _set("status", "done"), "invalid_value", "status"),
    ("outcome huge int", _set("outcome", {"n": 2**63}), "invalid_value", "outcome.n"),
    ("cache misses big", _set("expert_cache_misses", 2**32), "invalid_value", "expert_cache_misses"),
    ("cache writes zero", _set("prefix_cache_write_tokens", 0), "invalid_value", "prefix_cache_write_tokens"),
    (
        "cache writes 2**32",
        _set("prefix_cache_write_tokens", 2**32),
        "invalid_value",
        "prefix_cache_write_tokens",
    ),
    # negative_value
    ("seq negative", _set("seq", -1), "negative_value", "seq"),
    ("tokens_in negative", _set("tokens_in", -5), "negative_value", "tokens_in"),
    ("start negative", _set("start_ns", -1), "negative_value", "start_ns"),
    ("latency negative", _set_in("hops", 3, "latency_us", -1), "negative_value", "hops[3].latency_us"),
    ("expert negative", _set_in("experts", 0, "expert", -1), "negative_value", "experts[0].expert"),
    ("expert tokens negative", _set_in("experts", 0, "tokens", -3), "negative_value", "experts[0].tokens"),
    ("prefix negative", _set("prefix_cache_hit_tokens", -1), "negative_value", "prefix_cache_hit_tokens"),
    ("hits negative", _set("expert_cache_hits", -1), "negative_value", "expert_cache_hits"),
    ("distinct negative", _set("distinct_experts", -1), "negative_value", "distinct_experts"),
    (
        "cache writes negative",
        _set("prefix_cache_write_tokens", -1),
        "negative_value",
        "prefix_cache_write_tokens",
    ),
    # inconsistent_totals
    ("distinct wrong", _set("distinct_experts", 2), "inconsistent_totals", "distinct_experts"),
    ("expert tokens wrong", _set("expert_tokens", 1279), "inconsistent_totals", "expert_tokens"),
    (
        "prefix over tokens_in",
        _set("prefix_cache_hit_tokens", 513),
        "inconsistent_totals",
        "prefix_cache_hit_tokens",
    ),
    (
        "hits + cache writes over tokens_in",
        _set("prefix_cache_write_tokens", 257),  # 256 hits + 257 > 512
        "inconsistent_totals",
        "prefix_cache_write_tokens",
    ),
]


@pytest.mark.parametrize(("mutate", "code", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_record(record: dict[str, Any], mutate: Mutation, code: str, field: str | None) -> None:
    mutate(record)
    with pytest.raises(RecordError) as info:
        decode_record(_encode(record))
    assert (info.value.code, info.value.field) == (code, field)
    assert info.value.code in RECORD_ERROR_CODES
    with pytest.raises(RecordError) as info2:
        validate_record(record)
    assert info2.value.code == code


@pytest.mark.parametrize("line", [b"", b"not json", b"[1,2]", b'"str"', b"null", b"{", b'{"v":1}}', b"\xff"])
def test_malformed_record(line: bytes) -> None:
    with pytest.raises(RecordError) as info:
        decode_record(line)
    assert info.value.code == "malformed_record"


def test_non_canonical(record: dict[str, Any]) -> None:
    line = canonical_bytes(record)
    variants = [
        json.dumps(record, ensure_ascii=False).encode(),  # unsorted keys + whitespace
        json.dumps(record, sort_keys=True, separators=(",", ":")).encode(),  # \u escapes
        line.replace(b'"seq":42', b'"seq":42 '),
        b" " + line,
        line.replace(b'"seq":42', b'"seq":41,"seq":42'),  # duplicate key, last wins
        line.replace(b"edge-fra-1", b"edge\\u002dfra-1", 1),
        line + b"\r",
    ]
    assert decode_record(line) == record
    for variant in variants:
        with pytest.raises(RecordError) as info:
            decode_record(variant)
        assert info.value.code == "non_canonical", variant


def test_negative_zero_is_non_canonical(record: dict[str, Any]) -> None:
    record["clock_drift_us"] = 0
    line = canonical_bytes(record).replace(b'"clock_drift_us":0', b'"clock_drift_us":-0')
    with pytest.raises(RecordError) as info:
        decode_record(line)
    assert info.value.code == "non_canonical"


@pytest.mark.parametrize("name", ["client_request_id", "model_id"])
@pytest.mark.parametrize("char", ["\x00", "\x1b", "\r", "\x7f"])
def test_control_characters_are_refused_in_identifiers(record: dict[str, Any], name: str, char: str) -> None:
    record[name] = f"req{char}1"
    with pytest.raises(RecordError) as info:
        validate_record(record)
    assert (info.value.code, info.value.field) == ("invalid_value", name)


def test_tab_and_newline_are_allowed_in_identifiers(record: dict[str, Any]) -> None:
    record["client_request_id"] = "req\t1\nline two"
    validate_record(record)


def test_a_control_character_in_a_hop_node_is_refused(record: dict[str, Any]) -> None:
    record["hops"][0]["node"] = "gpu\x00"
    with pytest.raises(RecordError) as info:
        validate_record(record)
    assert (info.value.code, info.value.field) == ("invalid_value", "hops[0].node")


def _nested(depth: int) -> dict[str, Any]:
    outcome: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        outcome = {"a": outcome}
    return outcome


def test_outcome_nesting_is_limited_to_json_max_depth(record: dict[str, Any]) -> None:
    record["outcome"] = _nested(JSON_MAX_DEPTH)
    validate_record(record)
    record["outcome"] = _nested(JSON_MAX_DEPTH + 1)
    with pytest.raises(RecordError) as info:
        validate_record(record)
    assert (info.value.code, info.value.field) == ("invalid_value", "outcome")
    assert f"deeper than {JSON_MAX_DEPTH}" in info.value.message


def test_outcome_members_are_limited(record: dict[str, Any]) -> None:
    record["outcome"] = {"items": list(range(JSON_MAX_MEMBERS - 1))}
    validate_record(record)
    record["outcome"] = {"items": list(range(JSON_MAX_MEMBERS))}
    with pytest.raises(RecordError) as info:
        validate_record(record)
    assert (info.value.code, info.value.field) == ("invalid_value", "outcome")


def test_every_field_is_required(record: dict[str, Any]) -> None:
    assert set(record) == set(RECORD_FIELDS)
    for name in RECORD_FIELDS:
        rec = dict(record)
        del rec[name]
        with pytest.raises(RecordError) as info:
            validate_record(rec)
        assert (info.value.code, info.value.field) == ("missing_field", name)


def test_boundaries_accepted(record: dict[str, Any]) -> None:
    record.update(
        seq=2**63 - 1,
        tokens_in=2**32 - 1,
        tokens_out=0,
        prefix_cache_hit_tokens=2**32 - 1,
        clock_drift_us=-(2**31) + 1,
        client_request_id="r" * 128,
        model_id="\U0001f600" * 128,
        start_ns=1,
        end_ns=2**63 - 1,
        experts=[],
        distinct_experts=0,
        expert_tokens=0,
        status="rejected",
        outcome=None,
        tenant="a",
        contract="0" * 64,
        hops=[{"layer": "L3", "node": "n" * 64, "latency_us": 2**32 - 1}],
    )
    assert decode_record(canonical_bytes(record)) == record
    record.update(clock_drift_us=2**31 - 1, client_request_id="", outcome={})
    validate_record(record)


def test_every_code_has_a_case() -> None:
    covered = {c[2] for c in CASES} | {"malformed_record", "non_canonical"} | V2_CODES
    assert covered == RECORD_ERROR_CODES


def test_new_record_id_is_uuid7() -> None:
    rid = new_record_id()
    parsed = uuid.UUID(rid)
    assert str(parsed) == rid and parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert new_record_id() != rid


def test_make_record_fills_and_sorts() -> None:
    fields = {k: v for k, v in FIXED_RECORD.items() if k not in {"v", "distinct_experts", "expert_tokens"}}
    fields["experts"] = list(reversed(FIXED_RECORD["experts"]))
    rec = make_record(**fields)
    assert rec == FIXED_RECORD
    assert fields["experts"][0] == FIXED_RECORD["experts"][2]  # caller's list untouched

    del fields["record_id"], fields["outcome"]
    fresh = make_record(**fields)
    assert uuid.UUID(fresh["record_id"]).version == 7 and fresh["outcome"] is None

    with pytest.raises(RecordError) as info:
        make_record(**fields, expert_tokens=1)
    assert info.value.code == "inconsistent_totals"
    with pytest.raises(RecordError) as info:
        make_record(**{**fields, "experts": [{"layer": 0, "expert": 1, "tokens": 2.5}]})
    assert (info.value.code, info.value.field) == ("wrong_type", "experts[0].tokens")
