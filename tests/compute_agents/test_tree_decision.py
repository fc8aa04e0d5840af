"""The router's signed decision as the executor reads it: signature against the pinned router key, the
executor it names, its age, one use per record id, and the claims' shape."""

from __future__ import annotations

import base64
import time
from typing import Any

import orjson
import pytest

from compute_agents.metering import Trip
from compute_agents.router import Decision
from compute_agents.tree.decision import DecisionReader, decision_claims, encode_decision
from compute_agents.wire import ApiError
from treemeter_records import generate_keypair, new_record_id, protocol

ROUTER, ROUTER_PUBLIC = generate_keypair()
DECISION = Decision("legal", 0.91, ("L1", "L2", "L3", "L1"), "legal", False)


def claims(**changes: Any) -> dict[str, Any]:
    made = decision_claims(
        record_id=new_record_id(),
        router="router-1",
        node="l1.0123456789abcdef",
        rules_sha256="ab" * 32,
        decision=DECISION,
        executor="exec-a",
        l1_in_us=850,
        preheat=[[0, 3], [1, 5]],
    )
    return {**made, **changes}


def code_of(reader: DecisionReader, header: str | None) -> tuple[int, str]:
    with pytest.raises(ApiError) as refused:
        reader.read(header)
    return refused.value.status, refused.value.code


def test_a_signed_decision_sets_the_trip_and_is_served_once() -> None:
    reader = DecisionReader(ROUTER_PUBLIC, "exec-a")
    made = claims()
    header = encode_decision(made, ROUTER)
    routed = reader.read(header)
    assert routed.claims == made and routed.claims["confidence_ppm"] == 910_000
    assert routed.start_ns == made["decided_ns"] - 850_000
    assert 0 <= routed.transit_us < 5_000_000
    trip = Trip.routed("/v1/chat/completions", "req-1", routed)
    assert (trip.record_id, trip.start_ns, trip.l1_node) == (made["record_id"], routed.start_ns, made["node"])
    assert trip.path == ("L1", "L2", "L3", "L1") and trip.l1_before_us >= 850
    assert code_of(reader, header) == (409, "decision_replayed")


def test_decisions_that_are_missing_forged_misrouted_or_old_are_refused() -> None:
    reader = DecisionReader(ROUTER_PUBLIC, "exec-a")
    other, _ = generate_keypair()
    assert code_of(reader, None) == (403, "decision_missing")
    assert code_of(reader, encode_decision(claims(), other)) == (403, "decision_invalid")
    assert code_of(reader, encode_decision(claims(executor="exec-b"), ROUTER)) == (403, "decision_misrouted")
    old = claims(decided_ns=time.time_ns() - 61 * 10**9)
    assert code_of(reader, encode_decision(old, ROUTER)) == (403, "decision_expired")
    signed = protocol.sign_decision(ROUTER, claims())
    signed["claims"]["path"] = ["L1", "L3", "L1"]  # changed after signing
    tampered = base64.urlsafe_b64encode(orjson.dumps(signed)).decode()
    assert code_of(reader, tampered) == (403, "decision_invalid")
    assert code_of(reader, "not base64 ~~") == (403, "decision_invalid")
    assert code_of(reader, "A" * 5000) == (403, "decision_invalid")


@pytest.mark.parametrize(
    "changes",
    [
        {"l1_in_us": True},
        {"l1_in_us": "850"},
        {"confidence_ppm": "910000"},
        {"path": ["L1", "L9"]},
        {"preheat": [[0, 70000]]},
        {"preheat": [[0]]},
        {"extra": 1},
    ],
)
def test_claims_of_the_wrong_shape_are_refused_even_when_signed(changes: dict[str, Any]) -> None:
    reader = DecisionReader(ROUTER_PUBLIC, "exec-a")
    status, code = code_of(reader, encode_decision(claims(**changes), ROUTER))
    assert (status, code) == (403, "decision_invalid")


def test_the_signature_covers_the_claims_under_their_own_domain() -> None:
    made = claims()
    signed = protocol.sign_decision(ROUTER, made)
    assert protocol.verify_decision(ROUTER_PUBLIC, signed)
    assert not protocol.verify_decision(ROUTER_PUBLIC, {**signed, "key_id": "ed25519:0000000000000000"})
    assert not protocol.verify_decision(ROUTER_PUBLIC, {**signed, "claims": {**made, "l1_in_us": 1}})
    assert not protocol.verify_decision(ROUTER_PUBLIC, [signed])
    # A snapshot signature over the same bytes is not a decision signature (domain separation).
    snapshot_sig = protocol.sign_snapshot(ROUTER, made)
    assert not protocol.verify_decision(ROUTER_PUBLIC, {**signed, "sig": snapshot_sig})
