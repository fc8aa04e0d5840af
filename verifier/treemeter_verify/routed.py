"""Record format v2: the executor's signature over its record, the L1 router's signed decision inside
it, and the record's agreement with that decision (the platform's ``treemeter_records`` rules, restated
here on the standard library and ``cryptography``)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .canonical import canonical_bytes

RECORD_VERSION_V2 = 2
RECORD_DOMAIN = b"treemeter-record-v2\n"
DECISION_DOMAIN = b"treemeter-decision-v1\n"
_SIGNATURE_FIELDS = frozenset({"key_id", "sig"})
_DECISION_FIELDS = frozenset({"claims", "key_id", "sig"})


def is_routed(record: dict[str, Any]) -> bool:
    return record.get("v") == RECORD_VERSION_V2


def routing_problem(record: dict[str, Any], agents: dict[str, bytes]) -> str | None:
    """Why a v2 record fails its signatures or its decision; None when it passes.

    The executor's signature is checked over the canonical bytes of the parsed record, so the figures
    the verifier bills are the ones the executor signed."""
    try:
        decision = record["decision"]
        unsigned = {k: v for k, v in record.items() if k != "executor_sig"}
        return (
            _signature_problem(
                "executor",
                record["executor_sig"],
                _SIGNATURE_FIELDS,
                RECORD_DOMAIN + canonical_bytes(unsigned),
                agents,
            )
            or _signature_problem(
                "router", decision, _DECISION_FIELDS, DECISION_DOMAIN + _claims_bytes(decision), agents
            )
            or _disagreement(record, decision["claims"])
        )
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return "the decision or the executor signature is malformed"


def _claims_bytes(decision: dict[str, Any]) -> bytes:
    if type(decision["claims"]) is not dict:
        raise TypeError("claims must be an object")
    return canonical_bytes(decision["claims"])


def _signature_problem(
    signer: str, signed: dict[str, Any], fields: frozenset[str], message: bytes, agents: dict[str, bytes]
) -> str | None:
    if set(signed) != fields:
        return f"{signer} signature is malformed"
    key_id = signed["key_id"]
    public_key = agents.get(key_id)
    if public_key is None:
        return f"{signer} key {key_id} is not pinned"
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(
            base64.b64decode(signed["sig"], validate=True), message
        )
    except (InvalidSignature, binascii.Error):
        return f"{signer} signature does not verify"
    return None


def _disagreement(record: dict[str, Any], claims: dict[str, Any]) -> str | None:
    """The first rule by which the record is not the one the router decided (``decision_mismatch``)."""
    hops = record["hops"]
    layers = [hop["layer"] for hop in hops]
    if claims["record_id"] != record["record_id"]:
        return "the decision is for another record"
    if claims["executor"] != record["agent_id"]:
        return "the decision names another executor"
    if record["start_ns"] != claims["decided_ns"] - claims["l1_in_us"] * 1000:
        return "start_ns is not decided_ns - l1_in_us × 1000"
    if layers != claims["path"] and not (record["status"] == "rejected" and layers == ["L1"]):
        return "the hops do not follow the decided path"
    if any(hop["node"] != claims["node"] for hop in hops if hop["layer"] == "L1"):
        return "an L1 hop is not on the router's node"
    if hops[0]["latency_us"] < claims["l1_in_us"]:
        return "the first hop is shorter than the router's l1_in_us"
    return None
