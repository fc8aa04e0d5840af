"""Signed batches: build, parse, signature, Merkle root, header checks and tampering."""

from __future__ import annotations

import base64
import copy
from typing import Any

import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from treemeter_records import (
    BatchError,
    ParsedBatch,
    RecordError,
    build_batch,
    canonical_bytes,
    check_batch_signature,
    check_merkle_root,
    generate_keypair,
    key_id_for,
    leaf_hash,
    parse_batch,
    private_key_from_seed,
    private_key_seed,
    public_key_bytes,
    public_key_from_b64,
    public_key_to_b64,
    validate_batch_records,
    verify_batch_signature,
    verify_header,
)

from .conftest import FIXED_CREATED_NS, FIXED_RECORD, FIXED_SEED, BodyMaker

AGENT = FIXED_RECORD["agent_id"]
FIXED_SEED_KEY = private_key_from_seed(FIXED_SEED)


def ingest(body: bytes, public_key: Any, max_records: int = 100) -> ParsedBatch:
    """The server-side pipeline, batch-level checks only."""
    parsed = parse_batch(body, max_records)
    check_batch_signature(parsed, public_key)
    check_merkle_root(parsed)
    validate_batch_records(parsed)
    return parsed


@pytest.fixture
def body(three_records: list[dict[str, Any]], fixed_key: Ed25519PrivateKey) -> bytes:
    return build_batch(three_records, AGENT, fixed_key, created_ns=FIXED_CREATED_NS).body()


def _records_with_seqs(seqs: list[int]) -> list[dict[str, Any]]:
    out = []
    for i, seq in enumerate(seqs):
        rec = copy.deepcopy(FIXED_RECORD)
        rec.update(seq=seq, record_id=f"01936f4e-8a2b-7c3d-9e4f-{i:012x}")
        out.append(rec)
    return out


def test_round_trip(body: bytes, fixed_key: Ed25519PrivateKey) -> None:
    parsed = ingest(body, fixed_key.public_key())
    assert parsed.agent_id == AGENT and parsed.key_id == key_id_for(fixed_key)
    assert len(parsed.lines) == 3
    # Raw public key bytes work too, and the trailing newline is optional.
    assert verify_batch_signature(parse_batch(body.rstrip(b"\n"), 3), public_key_bytes(fixed_key))
    assert check_merkle_root(parsed) == [leaf_hash(line) for line in parsed.lines]


def test_wrong_key_fails(body: bytes) -> None:
    other, _ = generate_keypair()
    parsed = parse_batch(body, 10)
    assert not verify_batch_signature(parsed, other.public_key())
    with pytest.raises(BatchError) as info:
        check_batch_signature(parsed, other.public_key())
    assert (info.value.code, info.value.http_status) == ("bad_signature", 401)


def test_wrong_key_even_with_matching_key_id(
    three_records: list[dict[str, Any]], make_body: BodyMaker
) -> None:
    other, _ = generate_keypair()
    lines = [canonical_bytes(r) for r in three_records]
    forged = make_body(lines, {"first_seq": 42, "last_seq": 45, "key_id": key_id_for(FIXED_SEED_KEY)}, other)
    parsed = parse_batch(forged, 10)
    assert not verify_batch_signature(parsed, FIXED_SEED_KEY.public_key())
    assert not verify_batch_signature(parsed, other.public_key())  # key_id names another key


def test_forged_byte_in_any_record_line_is_detected(body: bytes, fixed_key: Ed25519PrivateKey) -> None:
    header_len = body.index(b"\n") + 1
    for pos in range(header_len, len(body) - 1):
        if body[pos] == ord("\n"):
            continue
        forged = body[:pos] + bytes([body[pos] ^ 0x01]) + body[pos + 1 :]
        with pytest.raises(BatchError) as info:
            ingest(forged, fixed_key.public_key())
        assert info.value.code == "merkle_mismatch", pos


def test_forged_byte_in_header_line_is_detected(body: bytes, fixed_key: Ed25519PrivateKey) -> None:
    header_len = body.index(b"\n")
    codes = set()
    for pos in range(header_len):
        for flip in (0x01, 0x20):
            forged = body[:pos] + bytes([body[pos] ^ flip]) + body[pos + 1 :]
            with pytest.raises(BatchError) as info:
                ingest(forged, fixed_key.public_key())
            codes.add(info.value.code)
    assert codes <= {"malformed_batch", "bad_signature", "header_mismatch", "merkle_mismatch"}
    assert "bad_signature" in codes


def test_swapped_or_dropped_records(body: bytes, fixed_key: Ed25519PrivateKey) -> None:
    head, *lines, _ = body.split(b"\n")
    swapped = b"\n".join([head, lines[1], lines[0], lines[2]])
    with pytest.raises(BatchError) as info:
        ingest(swapped, fixed_key.public_key())
    assert info.value.code == "merkle_mismatch"
    dropped = b"\n".join([head, lines[0], lines[1]])
    with pytest.raises(BatchError) as info:
        ingest(dropped, fixed_key.public_key())
    assert info.value.code == "header_mismatch"


@pytest.mark.parametrize(
    "mangle",
    [
        lambda b: b"",
        lambda b: b"\n",
        lambda b: b.split(b"\n")[0] + b"\n",  # header only
        lambda b: b"not json\n" + b.split(b"\n", 1)[1],
        lambda b: b"[]\n" + b.split(b"\n", 1)[1],
        lambda b: b.replace(b"\n", b"\n\n", 2).replace(b"\n\n", b"\n", 1),  # empty line between records
        lambda b: b.replace(b'"header":', b'"header": ', 1),  # non-canonical header line
        lambda b: b.replace(b"\n", b"\r\n"),
        lambda b: b.replace(b'"signature":"', b'"signature":"!', 1),
        lambda b: b.replace(b'"signature":"', b'"signature":"AAAA', 1),  # 67 bytes
        lambda b: b.replace(b'"signature":"/', b'"signature":"/ ', 1),
    ],
)
def test_malformed_batches(body: bytes, mangle: Any) -> None:
    with pytest.raises(BatchError) as info:
        parse_batch(mangle(body), 10)
    assert (info.value.code, info.value.http_status) == ("malformed_batch", 400)


@pytest.mark.parametrize(
    "header",
    [
        {"v": 2},
        {"count": "3"},
        {"count": True},
        {"first_seq": -1},
        {"created_ns": 0},
        {"created_ns": 1.5},
        {"agent_id": "Agent"},
        {"key_id": "rsa:0123456789abcdef"},
        {"merkle_root": "AB" * 32},
        {"extra": 1},
    ],
)
def test_malformed_headers(three_records: list[dict[str, Any]], make_body: BodyMaker, header: Any) -> None:
    lines = [canonical_bytes(r) for r in three_records]
    raw = orjson.loads(make_body(lines, {"first_seq": 42, "last_seq": 45}).split(b"\n")[0])
    raw["header"].update(header)
    body = orjson.dumps(raw, option=orjson.OPT_SORT_KEYS) + b"\n" + b"\n".join(lines)
    with pytest.raises(BatchError) as info:
        parse_batch(body, 10)
    assert info.value.code == "malformed_batch"


def test_missing_header_key(three_records: list[dict[str, Any]], make_body: BodyMaker) -> None:
    lines = [canonical_bytes(r) for r in three_records]
    raw = orjson.loads(make_body(lines).split(b"\n")[0])
    del raw["header"]["created_ns"]
    body = orjson.dumps(raw, option=orjson.OPT_SORT_KEYS) + b"\n" + b"\n".join(lines)
    with pytest.raises(BatchError, match="created_ns") as info:
        parse_batch(body, 10)
    assert info.value.code == "malformed_batch"


def test_batch_too_large(body: bytes) -> None:
    with pytest.raises(BatchError) as info:
        parse_batch(body, max_records=2)
    assert (info.value.code, info.value.http_status) == ("batch_too_large", 413)
    parse_batch(body, max_records=3)


@pytest.mark.parametrize(
    ("seqs", "header"),
    [
        ([5, 6, 7], {"count": 2}),  # count disagrees with the lines (parse_batch)
        ([5, 6, 7], {"first_seq": 6, "last_seq": 7}),  # range too small for 3 records (parse_batch)
        ([5, 6, 7], {"first_seq": 4, "last_seq": 7}),  # first line is not first_seq
        ([5, 6, 7], {"first_seq": 5, "last_seq": 8}),  # last line is not last_seq
        ([5, 7, 6], {"first_seq": 5, "last_seq": 7}),  # not increasing
        ([5, 5, 7], {"first_seq": 5, "last_seq": 7}),  # repeated seq
    ],
)
def test_header_mismatch(
    make_body: BodyMaker, fixed_key: Ed25519PrivateKey, seqs: list[int], header: Any
) -> None:
    lines = [canonical_bytes(r) for r in _records_with_seqs(seqs)]
    with pytest.raises(BatchError) as info:
        ingest(make_body(lines, header), fixed_key.public_key())
    assert (info.value.code, info.value.http_status) == ("header_mismatch", 400)


def test_record_of_another_agent(make_body: BodyMaker, fixed_key: Ed25519PrivateKey) -> None:
    recs = _records_with_seqs([1, 2])
    recs[1]["agent_id"] = "someone-else"
    body = make_body([canonical_bytes(r) for r in recs], {"first_seq": 1, "last_seq": 2})
    with pytest.raises(BatchError) as info:
        ingest(body, fixed_key.public_key())
    assert info.value.code == "header_mismatch"


def test_per_record_problems(make_body: BodyMaker) -> None:
    recs = _records_with_seqs([10, 11, 12, 14])
    recs[1]["tokens_in"] = -1
    recs[2]["outcome"] = {"value": 1.5}
    lines = [
        canonical_bytes(r) if i != 2 else orjson.dumps(r, option=orjson.OPT_SORT_KEYS)
        for i, r in enumerate(recs)
    ]
    lines.insert(3, b'{"seq":13}')
    body = make_body(lines, {"first_seq": 10, "last_seq": 14})
    parsed = parse_batch(body, 10)
    check_merkle_root(parsed)
    result = validate_batch_records(parsed)
    assert [seq for seq, _ in result.valid] == [10, 14]
    assert result.valid_index == [0, 4]
    assert result.problems == [
        {
            "index": 1,
            "seq": 11,
            "record_id": recs[1]["record_id"],
            "code": "negative_value",
            "field": "tokens_in",
            "message": "tokens_in must not be negative",
        },
        {
            "index": 2,
            "seq": 12,
            "record_id": recs[2]["record_id"],
            "code": "wrong_type",
            "field": "outcome.value",
            "message": "floats are not allowed; encode decimals and money as strings",
        },
        {
            "index": 3,
            "seq": 13,
            "record_id": None,
            "code": "missing_field",
            "field": "v",
            "message": "v is required",
        },
    ]


def test_unreadable_record_is_a_problem_not_a_batch_error(make_body: BodyMaker) -> None:
    recs = _records_with_seqs([1, 3])
    lines = [canonical_bytes(recs[0]), b"garbage", canonical_bytes(recs[1])]
    result = validate_batch_records(parse_batch(make_body(lines, {"first_seq": 1, "last_seq": 3}), 10))
    assert [p["code"] for p in result.problems] == ["malformed_record"]
    assert result.problems[0]["seq"] is None
    assert [seq for seq, _ in result.valid] == [1, 3]


def test_a_long_record_id_is_reported_whole_for_the_platform_to_keep(make_body: BodyMaker) -> None:
    recs = _records_with_seqs([1])
    recs[0]["record_id"] = "x" * 65
    parsed = parse_batch(make_body([canonical_bytes(recs[0])], {"first_seq": 1, "last_seq": 1}), 10)
    [problem] = validate_batch_records(parsed).problems
    assert (problem["code"], problem["record_id"]) == ("invalid_value", "x" * 65)


def test_build_batch_rules(three_records: list[dict[str, Any]], fixed_key: Ed25519PrivateKey) -> None:
    with pytest.raises(ValueError, match="at least one"):
        build_batch([], AGENT, fixed_key)
    with pytest.raises(ValueError, match="agent_id"):
        build_batch(three_records, "Bad Agent", fixed_key)
    with pytest.raises(RecordError):
        build_batch(three_records, "other-agent", fixed_key)
    with pytest.raises(RecordError, match="twice"):
        build_batch([three_records[0], three_records[0]], AGENT, fixed_key)
    bad = copy.deepcopy(three_records)
    bad[1]["tokens_out"] = 1.0
    with pytest.raises(RecordError) as info:
        build_batch(bad, AGENT, fixed_key)
    assert info.value.code == "wrong_type"
    batch = build_batch(three_records, AGENT, fixed_key)  # created_ns defaults to now
    assert batch.header["created_ns"] > FIXED_CREATED_NS
    assert verify_header(batch.header, batch.signature, fixed_key.public_key())
    assert not verify_header({**batch.header, "count": 2}, batch.signature, fixed_key.public_key())


def test_key_helpers() -> None:
    private, public = generate_keypair()
    seed = private_key_seed(private)
    assert len(seed) == 32
    assert public_key_bytes(private_key_from_seed(seed)) == public_key_bytes(public)
    b64 = public_key_to_b64(public)
    assert base64.b64decode(b64) == public_key_bytes(public)
    assert public_key_bytes(public_key_from_b64(b64)) == public_key_bytes(public)
    key_id = key_id_for(public)
    assert key_id.startswith("ed25519:") and len(key_id) == len("ed25519:") + 16
    assert key_id == key_id_for(public_key_bytes(public)) == key_id_for(private)
    with pytest.raises(ValueError):
        private_key_from_seed(b"short")
    with pytest.raises(ValueError):
        public_key_from_b64("not base64!")
    with pytest.raises(ValueError):
        public_key_from_b64(base64.b64encode(b"x" * 31).decode())
