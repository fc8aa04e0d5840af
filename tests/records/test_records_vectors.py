"""Fixed test vectors: any change to encoding, hashing or signing must break these."""

from __future__ import annotations

import hashlib
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from treemeter_records import (
    build_batch,
    canonical_bytes,
    canonical_bytes_fast,
    check_batch_signature,
    check_merkle_root,
    decode_record,
    key_id_for,
    leaf_hash,
    parse_batch,
    public_key_to_b64,
    validate_batch_records,
)

from .conftest import FIXED_CREATED_NS

FIXED_CANONICAL = (
    b'{"agent_id":"agent-eu1.gpu-07","client_request_id":"req-\xce\xa9-7\xc3\xa9\\n\\"q\\"",'
    b'"clock_drift_us":-125,"contract":"ctr-2025-001","distinct_experts":3,"end_ns":1735689600250000000,'
    b'"expert_cache_hits":5,"expert_cache_misses":1,"expert_tokens":1280,'
    b'"experts":[{"expert":1,"layer":0,"tokens":300},{"expert":5,"layer":0,"tokens":340},'
    b'{"expert":2,"layer":1,"tokens":640}],'
    b'"hops":[{"latency_us":120,"layer":"L1","node":"edge-fra-1"},'
    b'{"latency_us":340,"layer":"L2","node":"router-fra-a"},'
    b'{"latency_us":231000,"layer":"L3","node":"gpu-07"},'
    b'{"latency_us":310,"layer":"L2","node":"router-fra-a"},'
    b'{"latency_us":95,"layer":"L1","node":"edge-fra-1"}],'
    b'"model_id":"mixtral-8x7b-instruct",'
    b'"outcome":{"n":3,"ref":"case-17","type":"matched_patient","value":"2000.00","verified":true},'
    b'"package":"moe-outcome.gold","prefix_cache_hit_tokens":256,'
    b'"record_id":"01936f4e-8a2b-7c3d-9e4f-5a6b7c8d9e0f","seq":42,"sla_class":"gold",'
    b'"start_ns":1735689600000000000,"status":"ok","tenant":"acme-health","tokens_in":512,"tokens_out":128,'
    b'"v":1,"weights_sha3":"df07a843fead5c3712490304f6d5bc53ff6d8330efd5433fb37ea628cecdf150"}'
)
FIXED_LEAF_HASH = "d1e79deaf9279ffa4f93cf3ed7c38b5452ecf1f6873f01dc7936c939cd278aa6"
# The same record with the optional prefix_cache_write_tokens (128): the member between the hits and the
# record id, nothing else changed.
WRITES_CANONICAL = FIXED_CANONICAL.replace(
    b'"prefix_cache_hit_tokens":256,', b'"prefix_cache_hit_tokens":256,"prefix_cache_write_tokens":128,'
)
WRITES_LEAF_HASH = "b1fde880480a08b3cebb26d32ca3976cc645973a38966163e3960efdffef9493"

SEED_PUBLIC_KEY_B64 = "A6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg="
SEED_KEY_ID = "ed25519:56475aa75463474c"
BATCH_LEAF_HASHES = [
    "d1e79deaf9279ffa4f93cf3ed7c38b5452ecf1f6873f01dc7936c939cd278aa6",
    "3a35f1d64063db0c6ab6f709753c21feb350fc4266338851204d98ebcd17a880",
    "ecb564fb31624109088c30d5862972905e2aa1c8d0e922cde32763ae086baa14",
]
BATCH_MERKLE_ROOT = "16f20b561b01e694502c9440a4b1da055f36cc2951fc022acabfd9d185b0b84e"
BATCH_HEADER_BYTES = (
    b'{"agent_id":"agent-eu1.gpu-07","count":3,"created_ns":1735689601000000000,"first_seq":42,'
    b'"key_id":"ed25519:56475aa75463474c","last_seq":45,'
    b'"merkle_root":"16f20b561b01e694502c9440a4b1da055f36cc2951fc022acabfd9d185b0b84e","v":1}'
)
BATCH_HEADER_DIGEST = "925f09de207e17c22e6fc2f20de3efc28c5e35453c44514939b15fa5ccb52ae5"
BATCH_SIGNATURE = "/ZfRkIs4axHlqJlHDyilr1lo+s/1nTQWFc8Pn2+IfDIkSTOldt5NiRbiJaGuL4GO6z3/eEwvTy4o46ov9EyqAw=="
BATCH_BODY_SHA256 = "834cf1dc2dd4c9d9ae485f244ea352d693d3181d642712ac8a04a1d1e1c783ff"


def test_fixed_record_canonical_bytes(record: dict[str, Any]) -> None:
    assert canonical_bytes(record) == FIXED_CANONICAL
    assert canonical_bytes_fast(record) == FIXED_CANONICAL
    assert len(FIXED_CANONICAL) == 1082


def test_fixed_record_leaf_hash(record: dict[str, Any]) -> None:
    assert leaf_hash(canonical_bytes(record)).hex() == FIXED_LEAF_HASH
    # The leaf hash is literally SHA-256(0x00 || canonical bytes).
    assert hashlib.sha256(b"\x00" + FIXED_CANONICAL).hexdigest() == FIXED_LEAF_HASH


def test_fixed_record_decodes_to_itself(record: dict[str, Any]) -> None:
    assert decode_record(FIXED_CANONICAL) == record


def test_record_with_cache_writes(record: dict[str, Any]) -> None:
    record["prefix_cache_write_tokens"] = 128
    assert canonical_bytes(record) == WRITES_CANONICAL
    assert canonical_bytes_fast(record) == WRITES_CANONICAL
    assert len(WRITES_CANONICAL) == 1114
    assert leaf_hash(WRITES_CANONICAL).hex() == WRITES_LEAF_HASH
    assert hashlib.sha256(b"\x00" + WRITES_CANONICAL).hexdigest() == WRITES_LEAF_HASH
    assert decode_record(WRITES_CANONICAL) == record


def test_seed_key(fixed_key: Ed25519PrivateKey) -> None:
    # RFC 8032-style derivation of the public key of seed 00 01 .. 1f.
    assert public_key_to_b64(fixed_key) == SEED_PUBLIC_KEY_B64
    assert key_id_for(fixed_key) == SEED_KEY_ID


def test_fixed_batch(three_records: list[dict[str, Any]], fixed_key: Ed25519PrivateKey) -> None:
    # Given out of order on purpose: build_batch orders by seq.
    shuffled = [three_records[2], three_records[0], three_records[1]]
    batch = build_batch(shuffled, "agent-eu1.gpu-07", fixed_key, created_ns=FIXED_CREATED_NS)

    assert [leaf_hash(line).hex() for line in batch.lines] == BATCH_LEAF_HASHES
    assert batch.lines[0] == FIXED_CANONICAL
    assert batch.header["merkle_root"] == BATCH_MERKLE_ROOT
    assert batch.header_bytes == BATCH_HEADER_BYTES
    assert batch.header_digest == BATCH_HEADER_DIGEST
    assert batch.signature == BATCH_SIGNATURE
    body = batch.body()
    assert hashlib.sha256(body).hexdigest() == BATCH_BODY_SHA256
    assert (
        body.split(b"\n")[0]
        == b'{"header":' + BATCH_HEADER_BYTES + b',"signature":"' + BATCH_SIGNATURE.encode() + b'"}'
    )

    # Root recomputed by hand from the RFC 6962 definition for n = 3: H(1 || H(1 || l0 || l1) || l2).
    l0, l1, l2 = (bytes.fromhex(h) for h in BATCH_LEAF_HASHES)
    left = hashlib.sha256(b"\x01" + l0 + l1).digest()
    assert hashlib.sha256(b"\x01" + left + l2).hexdigest() == BATCH_MERKLE_ROOT

    parsed = parse_batch(body, max_records=10)
    assert parsed.header_digest == BATCH_HEADER_DIGEST
    check_batch_signature(parsed, fixed_key.public_key())
    check_merkle_root(parsed)
    result = validate_batch_records(parsed)
    assert result.problems == []
    assert [seq for seq, _ in result.valid] == [42, 43, 45]
    assert [rec for _, rec in result.valid] == three_records
