"""Record format v2: the executor's signature over its record, the L1 router's signed decision inside
it, and the record's agreement with that decision (the platform's ``treemeter_records`` rules, restated
here on the standard library and ``cryptography``)."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .canonical import canonical_bytes

RECORD_VERSION_V2 = 2
RECORD_DOMAIN = b"treemeter-record-v2\n"
DECISION_DOMAIN = b"treemeter-decision-v1\n"
_SIGNATURE_FIELDS = frozenset({"key_id", "sig"})
_DECISION_FIELDS = frozenset({"claims", "key_id", "sig"})
# The optional claim of a retry: its request's earlier attempts, sent and never answered, never billed.
SUPERSEDES = "supersedes"
SUPERSEDES_MAX = 8
# The optional claim of a job the router took from its durable queue: the µs from the router's receipt
# of the request to the job's dispatch (the queue hop). The record's start is still the receipt.
QUEUED_US = "queued_us"
QUEUED_US_LIMIT = 2**40  # about 12.7 days
# The optional claim of a request served by its subtree's fallback while that subtree's breaker was
# open: the subtree the policy chose (``subtree`` names the one that served).
FALLBACK_FROM = "fallback_from"
_slug = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}").fullmatch
_uuid7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}").fullmatch


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
            or _supersedes_problem(decision["claims"])
            or _queued_problem(decision["claims"])
            or _fallback_problem(decision["claims"])
            or _disagreement(record, decision["claims"])
        )
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return "the decision or the executor signature is malformed"


def superseded_ids(record: dict[str, Any]) -> list[str]:
    """The record ids a routed record's decision supersedes (none without the claim); only for a record
    that passed ``routing_problem``, whose claim is then well formed."""
    ids: list[str] = record["decision"]["claims"].get(SUPERSEDES, [])
    return ids


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


def _supersedes_problem(claims: dict[str, Any]) -> str | None:
    """Why the optional ``supersedes`` claim is malformed (the reference's form rules); None when absent."""
    if SUPERSEDES not in claims:
        return None
    where, superseded = f"decision.claims.{SUPERSEDES}", claims[SUPERSEDES]
    if type(superseded) is not list or not 0 < len(superseded) <= SUPERSEDES_MAX:
        return f"{where} must be a list of 1..{SUPERSEDES_MAX} record ids"
    if not all(type(r) is str and _uuid7(r) is not None for r in superseded):
        return f"{where} holds UUIDv7 record ids"
    if len(set(superseded)) != len(superseded) or claims["record_id"] in superseded:
        return f"{where} must be distinct earlier attempts, not this record"
    return None


def _queued_problem(claims: dict[str, Any]) -> str | None:
    """Why the optional ``queued_us`` claim is malformed (the reference's form rules: an integer in
    [1, 2**40)); None when absent."""
    if QUEUED_US not in claims:
        return None
    where, queued = f"decision.claims.{QUEUED_US}", claims[QUEUED_US]
    if type(queued) is not int:
        return f"{where} must be an integer"
    if queued < 0:
        return f"{where} must not be negative"
    if not 1 <= queued < QUEUED_US_LIMIT:
        return f"{where} must be in [1, {QUEUED_US_LIMIT})"
    return None


def _fallback_problem(claims: dict[str, Any]) -> str | None:
    """Why the optional ``fallback_from`` claim is malformed (a subtree name other than ``subtree``);
    None when absent."""
    if FALLBACK_FROM not in claims:
        return None
    where, origin = f"decision.claims.{FALLBACK_FROM}", claims[FALLBACK_FROM]
    if type(origin) is not str or _slug(origin) is None:
        return f"{where} must match ^[a-z0-9][a-z0-9._-]{{0,63}}$"
    if origin == claims["subtree"]:
        return f"{where} must be another subtree"
    return None


def _receipt_ns(claims: dict[str, Any]) -> int:
    """When the router received the request (ns), the record's start: ``decided_ns`` less the µs of the
    router's part (``l1_in_us``) and of the queue hop (``queued_us``, 0 when absent)."""
    decided_ns: int = claims["decided_ns"]
    return decided_ns - (claims["l1_in_us"] + claims.get(QUEUED_US, 0)) * 1000


def _disagreement(record: dict[str, Any], claims: dict[str, Any]) -> str | None:
    """The first rule by which the record is not the one the router decided (``decision_mismatch``)."""
    hops = record["hops"]
    layers = [hop["layer"] for hop in hops]
    if claims["record_id"] != record["record_id"]:
        return "the decision is for another record"
    if claims["executor"] != record["agent_id"]:
        return "the decision names another executor"
    if record["start_ns"] != _receipt_ns(claims):
        if QUEUED_US in claims:
            return "start_ns is not decided_ns - (l1_in_us + queued_us) × 1000"
        return "start_ns is not decided_ns - l1_in_us × 1000"
    if layers != claims["path"] and not (record["status"] == "rejected" and layers == ["L1"]):
        return "the hops do not follow the decided path"
    if any(hop["node"] != claims["node"] for hop in hops if hop["layer"] == "L1"):
        return "an L1 hop is not on the router's node"
    if hops[0]["latency_us"] < claims["l1_in_us"]:
        return "the first hop is shorter than the router's l1_in_us"
    return None
