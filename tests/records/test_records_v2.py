"""Record format v2: the fixed worked example pinned byte for byte, the decision's agreement with the
record (one failing record per rule, on the reference and the compiled path alike), and both
signatures checked against the right keys and refused under the wrong ones."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from treemeter_records import (
    RecordError,
    canonical_bytes,
    check_record_signatures,
    decode_record,
    fast_record,
    generate_keypair,
    key_id_for,
    leaf_hash,
    line_signing_bytes,
    public_key_to_b64,
    record_signing_bytes,
)
from treemeter_records.wire import decode_wire

from .v2_example import EXECUTOR_KEY, ROUTER_KEY, v2_record

V2_LEAF_HASH = "bcfcda5382fad88cf7f00ffb71029534ca097b0fff01979afba3c33f670e9665"
DECISION_SIG = "xexstghFvBJ92aSpKJdk0LbIUpW41xAYbc1/KXwsyuKiZcrRqB7Pyv9slM6kwxppm9PrpLG3nht4h1heAFsQBg=="
EXECUTOR_SIG = "GR5vDFsbgGuT4TfZlBOGILH1N9YuElPieulxAGijwCUMYGLnRNdlPyb+Qj6OKufU6axSrU4UE7KNE1EnQMWBDQ=="
ROUTER_PUBLIC_B64 = "Kay64UG8yvCyLhqU000LxzYeUm0L/hLIl5S8kyKWbdc="

Mutation = Callable[[dict[str, Any]], Any]
EARLIER_ATTEMPT = "01936f4e-8a2b-7c3d-9e4f-5a6b7c8d9e10"


def _claims(name: str, value: Any) -> Mutation:
    return lambda r: r["decision"]["claims"].__setitem__(name, value)


def _hop(index: int, name: str, value: Any) -> Mutation:
    return lambda r: r["hops"][index].__setitem__(name, value)


V2_CASES: list[tuple[str, Mutation, str, str]] = [
    (
        "decision for another record",
        _claims("record_id", "01936f4e-8a2b-7c3d-9e4f-5a6b7c8d9e10"),
        "decision_mismatch",
        "decision.claims.record_id",
    ),
    ("another executor", _claims("executor", "gpu-08"), "decision_mismatch", "decision.claims.executor"),
    (
        "start not the router's receipt",
        lambda r: r.__setitem__("start_ns", r["start_ns"] + 1),
        "decision_mismatch",
        "start_ns",
    ),
    ("hops off the path", _claims("path", ["L1", "L3", "L1"]), "decision_mismatch", "hops"),
    ("L1 hop on another node", _hop(3, "node", "l1.0000000000000000"), "decision_mismatch", "hops"),
    (
        "first hop shorter than the router's part",
        _hop(0, "latency_us", 849),
        "decision_mismatch",
        "hops[0].latency_us",
    ),
    (
        "claims missing a field",
        lambda r: r["decision"]["claims"].pop("subtree"),
        "missing_field",
        "decision.claims.subtree",
    ),
    ("claims with an extra field", _claims("gpu", 1), "unknown_field", "decision.claims.gpu"),
    ("a bad node", _claims("node", "edge-1"), "invalid_value", "decision.claims.node"),
    (
        "a domain that is no slug",
        _claims("domain", "Contract Review"),
        "invalid_value",
        "decision.claims.domain",
    ),
    (
        "confidence over a million ppm",
        _claims("confidence_ppm", 1_000_001),
        "invalid_value",
        "decision.claims.confidence_ppm",
    ),
    ("confidence as a bool", _claims("confidence_ppm", True), "wrong_type", "decision.claims.confidence_ppm"),
    (
        "l2_confirmation as an int",
        _claims("l2_confirmation", 0),
        "wrong_type",
        "decision.claims.l2_confirmation",
    ),
    ("an unknown layer in the path", _claims("path", ["L1", "L4"]), "invalid_value", "decision.claims.path"),
    (
        "a preheat entry that is no pair",
        _claims("preheat", [[0, 1, 2]]),
        "invalid_value",
        "decision.claims.preheat",
    ),
    (
        "a short signature",
        lambda r: r["decision"].__setitem__("sig", "AAAA"),
        "invalid_value",
        "decision.sig",
    ),
    (
        "a bad key id",
        lambda r: r["executor_sig"].__setitem__("key_id", "rsa:1"),
        "invalid_value",
        "executor_sig.key_id",
    ),
    ("no executor signature", lambda r: r.pop("executor_sig"), "missing_field", "executor_sig"),
    ("a v1 record with a decision", lambda r: r.__setitem__("v", 1), "unknown_field", "decision"),
    ("supersedes nothing", _claims("supersedes", []), "invalid_value", "decision.claims.supersedes"),
    (
        "supersedes more than 8 attempts",
        _claims("supersedes", [f"01936f4e-8a2b-7c3d-9e4f-5a6b7c8d9e{k:02d}" for k in range(9)]),
        "invalid_value",
        "decision.claims.supersedes",
    ),
    (
        "supersedes no record id",
        _claims("supersedes", ["attempt-1"]),
        "invalid_value",
        "decision.claims.supersedes",
    ),
    (
        "supersedes one attempt twice",
        _claims("supersedes", [EARLIER_ATTEMPT, EARLIER_ATTEMPT]),
        "invalid_value",
        "decision.claims.supersedes",
    ),
    ("a queue wait of zero", _claims("queued_us", 0), "invalid_value", "decision.claims.queued_us"),
    ("a queue wait as a bool", _claims("queued_us", True), "wrong_type", "decision.claims.queued_us"),
    (
        "a queue wait the start does not count",
        _claims("queued_us", 5_000),
        "decision_mismatch",
        "start_ns",
    ),
    (
        "a fallback from its own subtree",
        lambda r: r["decision"]["claims"].__setitem__("fallback_from", r["decision"]["claims"]["subtree"]),
        "invalid_value",
        "decision.claims.fallback_from",
    ),
    (
        "a fallback from no slug",
        _claims("fallback_from", "Legal GPU"),
        "invalid_value",
        "decision.claims.fallback_from",
    ),
    ("a fallback as a number", _claims("fallback_from", 7), "wrong_type", "decision.claims.fallback_from"),
    (
        "supersedes itself",
        lambda r: r["decision"]["claims"].__setitem__("supersedes", [r["record_id"]]),
        "invalid_value",
        "decision.claims.supersedes",
    ),
]
V2_CODES = {case[2] for case in V2_CASES} | {"decision_signature_invalid", "executor_signature_invalid"}


def test_the_worked_example_is_pinned() -> None:
    record = v2_record()
    line = canonical_bytes(record)
    assert leaf_hash(line).hex() == V2_LEAF_HASH
    assert record["decision"]["sig"] == DECISION_SIG and record["executor_sig"]["sig"] == EXECUTOR_SIG
    assert public_key_to_b64(ROUTER_KEY) == ROUTER_PUBLIC_B64
    assert record["decision"]["key_id"] == key_id_for(ROUTER_KEY) == "ed25519:24f6ed6acbfe1009"
    assert decode_record(line) == record
    assert fast_record(line) == decode_wire(line) and fast_record(line) is not None


def test_the_executor_signs_the_record_without_its_signature_cut_from_the_line() -> None:
    record = v2_record()
    line = canonical_bytes(record)
    assert line_signing_bytes(line) == record_signing_bytes(record)
    assert b"executor_sig" not in line_signing_bytes(line) and b'"decision"' in line_signing_bytes(line)
    check_record_signatures(
        line_signing_bytes(line),
        record["executor_sig"],
        record["decision"],
        EXECUTOR_KEY.public_key(),
        ROUTER_KEY.public_key(),
    )


def _signature_code(record: dict[str, Any], executor: Any, router: Any) -> str:
    with pytest.raises(RecordError) as refused:
        check_record_signatures(
            record_signing_bytes(record), record["executor_sig"], record["decision"], executor, router
        )
    return refused.value.code


def test_a_forged_part_or_the_wrong_key_is_refused() -> None:
    executor, router = EXECUTOR_KEY.public_key(), ROUTER_KEY.public_key()
    _, stranger = generate_keypair()
    assert _signature_code(v2_record(), stranger, router) == "executor_signature_invalid"
    assert _signature_code(v2_record(), executor, stranger) == "decision_signature_invalid"
    more_tokens = v2_record()
    more_tokens["tokens_out"] = 17  # the executor's part changed after it signed
    assert _signature_code(more_tokens, executor, router) == "executor_signature_invalid"
    # Nor can the router's claims change under the executor's signature, which covers them too.
    other_subtree = v2_record()
    other_subtree["decision"]["claims"]["subtree"] = "medical"
    assert _signature_code(other_subtree, executor, router) == "executor_signature_invalid"


@pytest.mark.parametrize(("mutate", "code", "field"), [c[1:] for c in V2_CASES], ids=[c[0] for c in V2_CASES])
def test_a_record_that_disagrees_with_its_decision_is_refused_on_both_paths(
    mutate: Mutation, code: str, field: str
) -> None:
    record = v2_record()
    mutate(record)
    line = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    with pytest.raises(RecordError) as refused:
        decode_record(line)
    assert (refused.value.code, refused.value.field) == (code, field)
    assert fast_record(line) is None  # the compiled path never accepts what the reference refuses


def test_a_retry_names_the_attempts_it_supersedes_and_both_paths_accept_it() -> None:
    record = v2_record()
    record["decision"]["claims"]["supersedes"] = [EARLIER_ATTEMPT]
    line = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert decode_record(line)["decision"]["claims"]["supersedes"] == [EARLIER_ATTEMPT]
    fast = fast_record(line)
    assert fast is not None and fast.decision is not None
    assert fast.decision.claims.supersedes == (EARLIER_ATTEMPT,)
    assert decode_wire(line).decision.claims.supersedes == (EARLIER_ATTEMPT,)  # type: ignore[union-attr]


def test_a_queued_job_starts_at_the_receipt_before_its_queue_wait() -> None:
    record = v2_record()
    claims = record["decision"]["claims"]
    claims["queued_us"] = 90_000_000  # 90 s in the queue: decided 90 s after the request arrived
    claims["decided_ns"] += 90_000_000_000
    line = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert decode_record(line)["start_ns"] == claims["decided_ns"] - (claims["l1_in_us"] + 90_000_000) * 1000
    fast = fast_record(line)
    assert fast is not None and fast.decision is not None and fast.decision.claims.queued_us == 90_000_000


def test_a_fallback_names_the_subtree_the_policy_chose_and_both_paths_accept_it() -> None:
    record = v2_record()
    record["decision"]["claims"]["fallback_from"] = "legal-gpu"
    line = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert decode_record(line)["decision"]["claims"]["fallback_from"] == "legal-gpu"
    fast = fast_record(line)
    assert fast is not None and fast.decision is not None
    assert fast.decision.claims.fallback_from == "legal-gpu"
    assert canonical_bytes(decode_record(line)) == line  # the claim keeps its canonical place
