"""Usage record formats v1 and v2: per-record validation and decoding of wire lines.

v2 is v1 with two more fields, made in the serving tree: ``decision`` (the L1 router's signed routing
decision, as the executor received it) and ``executor_sig`` (the executor's signature over the rest of
the record). This module checks their form and how they agree with the record; whether the signatures
verify needs the registered keys (``treemeter_records.routed``).

Both versions have one optional field, added after their release: ``prefix_cache_write_tokens``
(``OPTIONAL_RECORD_FIELDS``), present only when at least 1, so absent means 0, every record made
before it stays valid and byte-identical, and each value has one encoding.

This is on the ingest hot path: plain dicts straight from orjson, ``type(x) is int`` checks
(``bool`` is not an int here), precompiled ``fullmatch`` patterns, no per-record objects.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NoReturn

import orjson

from .encoding import INT_MAX, INT_MIN, matches_canonical
from .errors import (
    DECISION_MISMATCH,
    INCONSISTENT_TOTALS,
    INVALID_VALUE,
    MALFORMED_RECORD,
    MISSING_FIELD,
    NEGATIVE_VALUE,
    NON_CANONICAL,
    UNKNOWN_FIELD,
    UNSUPPORTED_VERSION,
    WRONG_TYPE,
    RecordError,
)
from .limits import JSON_MAX_DEPTH, JSON_MAX_MEMBERS, NODE_MAX, SLUG_MAX, TEXT_MAX, has_forbidden_control

RECORD_VERSION = 1
RECORD_VERSION_V2 = 2
SUPPORTED_VERSIONS = (RECORD_VERSION, RECORD_VERSION_V2)

#: Every v1 field, in documentation order (all are required, no others are allowed).
RECORD_FIELDS: tuple[str, ...] = (
    "v",
    "record_id",
    "agent_id",
    "seq",
    "tenant",
    "contract",
    "package",
    "sla_class",
    "client_request_id",
    "model_id",
    "weights_sha3",
    "start_ns",
    "end_ns",
    "clock_drift_us",
    "tokens_in",
    "tokens_out",
    "hops",
    "experts",
    "distinct_experts",
    "expert_tokens",
    "prefix_cache_hit_tokens",
    "expert_cache_hits",
    "expert_cache_misses",
    "status",
    "outcome",
)
_FIELD_SET = frozenset(RECORD_FIELDS)
#: Every v2 field: v1's, then the router's signed decision and the executor's signature.
RECORD_FIELDS_V2: tuple[str, ...] = (*RECORD_FIELDS, "decision", "executor_sig")
_FIELD_SET_V2 = frozenset(RECORD_FIELDS_V2)
#: Prompt tokens the engine wrote into its prefix cache for the request (new full cache blocks stored):
#: optional in v1 and v2, present only when at least 1 (absent means 0), so records made before it stay
#: valid and byte-identical. ``prefix_cache_hit_tokens`` + this is at most ``tokens_in``.
PREFIX_CACHE_WRITE_TOKENS = "prefix_cache_write_tokens"
#: The optional fields of v1 and v2 records, in documentation order.
OPTIONAL_RECORD_FIELDS: tuple[str, ...] = (PREFIX_CACHE_WRITE_TOKENS,)
_FIELD_SET_WRITES = _FIELD_SET | {PREFIX_CACHE_WRITE_TOKENS}
_FIELD_SET_V2_WRITES = _FIELD_SET_V2 | {PREFIX_CACHE_WRITE_TOKENS}
DECISION_FIELDS = ("claims", "key_id", "sig")
SIGNATURE_FIELDS = ("key_id", "sig")
#: The router's claims, in documentation order (all required, no others allowed).
CLAIM_FIELDS: tuple[str, ...] = (
    "record_id",
    "router",
    "node",
    "rules_sha256",
    "domain",
    "confidence_ppm",
    "l2_confirmation",
    "path",
    "subtree",
    "executor",
    "preheat",
    "l1_in_us",
    "decided_ns",
)
# An optional claim, present only on a retry: the record ids of this request's earlier attempts that
# were sent and never answered (the executor may have run them). Those records are never billed.
SUPERSEDES = "supersedes"
SUPERSEDES_MAX = 8
# An optional claim, present only on a job the router took from its queue: the µs from the router's
# receipt of the request to the job's dispatch (the queue hop). The record's start is still the receipt.
QUEUED_US = "queued_us"
QUEUED_US_LIMIT = 2**40  # about 12.7 days
# An optional claim, present only while the decided subtree's breaker is open: the subtree the policy
# chose, whose fallback (``subtree``) served instead (docs/scheduler.md).
FALLBACK_FROM = "fallback_from"
OPTIONAL_CLAIMS = (FALLBACK_FROM, QUEUED_US, SUPERSEDES)
CONFIDENCE_PPM_MAX = 1_000_000
PATH_MAX = 8
PREHEAT_MAX = 1024
_HOP_FIELDS = ("layer", "node", "latency_us")
_HOP_SET = frozenset(_HOP_FIELDS)
_EXPERT_FIELDS = ("layer", "expert", "tokens")
_EXPERT_SET = frozenset(_EXPERT_FIELDS)

HOP_LAYERS = frozenset({"L1", "L2", "L3"})
STATUSES = frozenset({"ok", "error", "timeout", "rejected", "cancelled"})

U32 = 2**32
U63 = 2**63
I31 = 2**31
_slug = re.compile(rf"[a-z0-9][a-z0-9._-]{{0,{SLUG_MAX - 1}}}").fullmatch
_hex64 = re.compile(r"[0-9a-f]{64}").fullmatch
UUID7_PATTERN = r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
_uuid7 = re.compile(UUID7_PATTERN).fullmatch
L1_NODE_PATTERN = r"l1\.[0-9a-f]{16}"
KEY_ID_PATTERN = r"ed25519:[0-9a-f]{16}"
SIGNATURE_PATTERN = r"[A-Za-z0-9+/]{85}[AQgw]=="  # 64 bytes in standard base64, the unused bits zero
_l1_node = re.compile(L1_NODE_PATTERN).fullmatch
_key_id = re.compile(KEY_ID_PATTERN).fullmatch
_signature = re.compile(SIGNATURE_PATTERN).fullmatch


def is_slug(value: object) -> bool:
    """``^[a-z0-9][a-z0-9._-]{0,63}$`` (the form of agent ids, tenants, contracts, packages...)."""
    return type(value) is str and _slug(value) is not None


def _fail(code: str, field: str, message: str) -> NoReturn:
    raise RecordError(code, field, message)


def _uint(value: Any, field: str, limit: int, minimum: int = 0) -> int:
    """An int in [minimum, limit); negatives get ``negative_value``, other misses ``invalid_value``."""
    if type(value) is not int:
        _fail(WRONG_TYPE, field, f"{field} must be an integer")
    if value < minimum or value >= limit:
        if value < 0:
            _fail(NEGATIVE_VALUE, field, f"{field} must not be negative")
        _fail(INVALID_VALUE, field, f"{field} must be in [{minimum}, {limit})")
    return value


def _text(value: Any, field: str, min_len: int, max_len: int) -> None:
    if type(value) is not str:
        _fail(WRONG_TYPE, field, f"{field} must be a string")
    if not min_len <= len(value) <= max_len:
        _fail(INVALID_VALUE, field, f"{field} must be {min_len}..{max_len} characters long")
    if has_forbidden_control(value):
        _fail(INVALID_VALUE, field, f"{field} must not hold control characters other than tab and newline")


def _slug_field(value: Any, field: str) -> None:
    if type(value) is not str:
        _fail(WRONG_TYPE, field, f"{field} must be a string")
    if _slug(value) is None:
        _fail(INVALID_VALUE, field, f"{field} must match ^[a-z0-9][a-z0-9._-]{{0,63}}$")


def _check_keys(obj: Mapping[str, Any], fields: tuple[str, ...], prefix: str) -> None:
    for name in fields:
        if name not in obj:
            _fail(MISSING_FIELD, prefix + name, f"{prefix + name} is required")
    for name in obj:
        if name not in fields:
            shown = str(name)[:64]
            _fail(UNKNOWN_FIELD, prefix + shown, f"unknown field {prefix + shown!r}")


def _check_hops(hops: Any) -> None:
    # Field paths are only formatted on failure: this loop runs for every hop of every record.
    if type(hops) is not list:
        _fail(WRONG_TYPE, "hops", "hops must be a list")
    if not hops:
        _fail(INVALID_VALUE, "hops", "hops must not be empty")
    for i, hop in enumerate(hops):
        if type(hop) is not dict:
            _fail(WRONG_TYPE, f"hops[{i}]", "each hop must be an object")
        if hop.keys() != _HOP_SET:
            _check_keys(hop, _HOP_FIELDS, f"hops[{i}].")
        layer = hop["layer"]
        if type(layer) is not str or layer not in HOP_LAYERS:  # a list or dict is unhashable
            if type(layer) is not str:
                _fail(WRONG_TYPE, f"hops[{i}].layer", "hop layer must be a string")
            _fail(INVALID_VALUE, f"hops[{i}].layer", 'hop layer must be "L1", "L2" or "L3"')
        node = hop["node"]
        if type(node) is not str or not 0 < len(node) <= NODE_MAX or not node.isprintable():
            _text(node, f"hops[{i}].node", 1, NODE_MAX)
        latency = hop["latency_us"]
        if type(latency) is not int or not 0 <= latency < U32:
            _uint(latency, f"hops[{i}].latency_us", U32)


def _check_experts(experts: Any) -> int:
    """Validate the expert list; return the sum of its tokens."""
    if type(experts) is not list:
        _fail(WRONG_TYPE, "experts", "experts must be a list")
    total = 0
    prev = -1
    for i, entry in enumerate(experts):
        if type(entry) is not dict:
            _fail(WRONG_TYPE, f"experts[{i}]", "each expert entry must be an object")
        if entry.keys() != _EXPERT_SET:
            _check_keys(entry, _EXPERT_FIELDS, f"experts[{i}].")
        layer = entry["layer"]
        expert = entry["expert"]
        tokens = entry["tokens"]
        if type(layer) is not int or not 0 <= layer < 65536:
            _uint(layer, f"experts[{i}].layer", 65536)
        if type(expert) is not int or not 0 <= expert < 65536:
            _uint(expert, f"experts[{i}].expert", 65536)
        if type(tokens) is not int or not 0 < tokens < U32:
            _uint(tokens, f"experts[{i}].tokens", U32, 1)
        total += tokens
        key = (layer << 16) | expert
        if key <= prev:
            _fail(INVALID_VALUE, f"experts[{i}]", "experts must be sorted by (layer, expert), each pair once")
        prev = key
    return total


def _outcome_path(node: tuple[Any, ...] | None) -> str:
    """Render a (parent, key) chain built by ``check_outcome`` as ``outcome.a[1].b``."""
    parts: list[str] = []
    while node is not None:
        node, key = node
        parts.append(f"[{key}]" if type(key) is int else f".{key}")
    return "outcome" + "".join(reversed(parts))


def check_outcome(outcome: Any) -> None:
    """Raise ``RecordError`` unless ``outcome`` is null or an object within the format's rules."""
    if outcome is None:
        return
    if type(outcome) is not dict:
        _fail(WRONG_TYPE, "outcome", "outcome must be null or an object")
    # Iterative walk (no recursion limit); paths are kept as (parent, key) chains and only
    # rendered on failure. The JSON limits of every body (treemeter_records.limits) apply.
    members = 0
    stack: list[tuple[Any, tuple[Any, ...] | None, int]] = [(outcome, None, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        value, where, depth = pop()
        t = type(value)
        if t is str or t is bool or value is None:
            continue
        if t is int:
            if not INT_MIN <= value <= INT_MAX:
                _fail(
                    INVALID_VALUE,
                    _outcome_path(where),
                    "integers in outcome must fit in a signed 64-bit integer",
                )
        elif t is dict or t is list:
            depth += 1
            members += len(value)
            if depth > JSON_MAX_DEPTH:
                _fail(INVALID_VALUE, "outcome", f"outcome nests deeper than {JSON_MAX_DEPTH} levels")
            if members > JSON_MAX_MEMBERS:
                _fail(INVALID_VALUE, "outcome", f"outcome holds more than {JSON_MAX_MEMBERS} members")
            if t is dict:
                for key, item in value.items():
                    if type(key) is not str:
                        _fail(WRONG_TYPE, _outcome_path(where), "outcome object keys must be strings")
                    push((item, (where, key), depth))
            else:
                for i, item in enumerate(value):
                    push((item, (where, i), depth))
        elif t is float:
            _fail(
                WRONG_TYPE,
                _outcome_path(where),
                "floats are not allowed; encode decimals and money as strings",
            )
        else:
            _fail(WRONG_TYPE, _outcome_path(where), f"unsupported type {t.__name__} in outcome")


def validate_record(rec: Any) -> None:
    """Raise ``RecordError`` unless ``rec`` is a valid v1 or v2 record.

    Only the format is checked: whether a record's time lies in the window the platform accepts is the
    platform's policy (ingest), and canonical form is checked by ``decode_record``.
    """
    if type(rec) is not dict:
        raise RecordError(MALFORMED_RECORD, None, "a record must be a JSON object")
    if "v" not in rec:
        _fail(MISSING_FIELD, "v", "v is required")
    v = rec["v"]
    if type(v) is not int:
        _fail(WRONG_TYPE, "v", "v must be an integer")
    if v not in SUPPORTED_VERSIONS:
        _fail(UNSUPPORTED_VERSION, "v", f"record version {v} is not supported (expected 1 or 2)")
    keys = rec.keys()
    if v == RECORD_VERSION:
        if keys != _FIELD_SET and keys != _FIELD_SET_WRITES:
            _check_keys(rec, (*RECORD_FIELDS, *(f for f in OPTIONAL_RECORD_FIELDS if f in rec)), "")
    elif keys != _FIELD_SET_V2 and keys != _FIELD_SET_V2_WRITES:
        _check_keys(rec, (*RECORD_FIELDS_V2, *(f for f in OPTIONAL_RECORD_FIELDS if f in rec)), "")

    record_id = rec["record_id"]
    if type(record_id) is not str:
        _fail(WRONG_TYPE, "record_id", "record_id must be a string")
    if _uuid7(record_id) is None:
        _fail(INVALID_VALUE, "record_id", "record_id must be a lowercase canonical UUIDv7")
    _slug_field(rec["agent_id"], "agent_id")
    _uint(rec["seq"], "seq", U63)
    _slug_field(rec["tenant"], "tenant")
    _slug_field(rec["contract"], "contract")
    _slug_field(rec["package"], "package")
    _slug_field(rec["sla_class"], "sla_class")
    _text(rec["client_request_id"], "client_request_id", 0, TEXT_MAX)
    _text(rec["model_id"], "model_id", 1, TEXT_MAX)
    weights = rec["weights_sha3"]
    if type(weights) is not str:
        _fail(WRONG_TYPE, "weights_sha3", "weights_sha3 must be a string")
    if _hex64(weights) is None:
        _fail(INVALID_VALUE, "weights_sha3", "weights_sha3 must be 64 lowercase hex characters")
    start_ns = _uint(rec["start_ns"], "start_ns", U63, 1)
    end_ns = _uint(rec["end_ns"], "end_ns", U63, 1)
    drift = rec["clock_drift_us"]
    if type(drift) is not int:
        _fail(WRONG_TYPE, "clock_drift_us", "clock_drift_us must be an integer")
    if not -I31 < drift < I31:
        _fail(INVALID_VALUE, "clock_drift_us", "|clock_drift_us| must be below 2**31")
    tokens_in = _uint(rec["tokens_in"], "tokens_in", U32)
    _uint(rec["tokens_out"], "tokens_out", U32)
    _check_hops(rec["hops"])
    expert_sum = _check_experts(rec["experts"])
    distinct = _uint(rec["distinct_experts"], "distinct_experts", U63)
    expert_tokens = _uint(rec["expert_tokens"], "expert_tokens", U63)
    prefix_hits = _uint(rec["prefix_cache_hit_tokens"], "prefix_cache_hit_tokens", U32)
    prefix_writes = 0
    if PREFIX_CACHE_WRITE_TOKENS in rec:
        prefix_writes = rec[PREFIX_CACHE_WRITE_TOKENS]
        if type(prefix_writes) is not int or not 0 < prefix_writes < U32:
            _check_cache_writes(prefix_writes)
    _uint(rec["expert_cache_hits"], "expert_cache_hits", U32)
    _uint(rec["expert_cache_misses"], "expert_cache_misses", U32)
    status = rec["status"]
    if type(status) is not str:
        _fail(WRONG_TYPE, "status", "status must be a string")
    if status not in STATUSES:
        _fail(INVALID_VALUE, "status", "status must be one of ok, error, timeout, rejected, cancelled")
    check_outcome(rec["outcome"])

    # Cross-field rules.
    if end_ns < start_ns:
        _fail(INVALID_VALUE, "end_ns", "end_ns must not be before start_ns")
    if distinct != len(rec["experts"]):
        _fail(INCONSISTENT_TOTALS, "distinct_experts", "distinct_experts must equal the number of experts")
    if expert_tokens != expert_sum:
        _fail(INCONSISTENT_TOTALS, "expert_tokens", "expert_tokens must equal the sum of experts' tokens")
    if prefix_hits > tokens_in:
        _fail(INCONSISTENT_TOTALS, "prefix_cache_hit_tokens", "prefix_cache_hit_tokens exceeds tokens_in")
    if prefix_hits + prefix_writes > tokens_in:
        _fail(
            INCONSISTENT_TOTALS,
            PREFIX_CACHE_WRITE_TOKENS,
            "prefix_cache_hit_tokens + prefix_cache_write_tokens exceeds tokens_in",
        )
    if v == RECORD_VERSION_V2:
        _check_signature_form(rec["executor_sig"], "executor_sig", SIGNATURE_FIELDS)
        _check_signature_form(rec["decision"], "decision", DECISION_FIELDS)
        check_decision_agrees(rec, check_claims(rec["decision"]["claims"]))


def _check_cache_writes(value: Any) -> NoReturn:
    """The error of a ``prefix_cache_write_tokens`` outside [1, 2**32): 0 is absent, never written."""
    field = PREFIX_CACHE_WRITE_TOKENS
    if type(value) is not int:
        _fail(WRONG_TYPE, field, f"{field} must be an integer")
    if value < 0:
        _fail(NEGATIVE_VALUE, field, f"{field} must not be negative")
    if value == 0:
        _fail(INVALID_VALUE, field, f"{field} is present only when at least 1 (absent means 0)")
    _fail(INVALID_VALUE, field, f"{field} must be in [1, {U32})")


def _check_signature_form(value: Any, field: str, fields: tuple[str, ...]) -> None:
    if type(value) is not dict:
        _fail(WRONG_TYPE, field, f"{field} must be an object")
    if value.keys() != set(fields):
        _check_keys(value, fields, field + ".")
    key_id, signature = value["key_id"], value["sig"]
    if type(key_id) is not str or _key_id(key_id) is None:
        _fail(INVALID_VALUE, field + ".key_id", f"{field}.key_id must match {KEY_ID_PATTERN}")
    if type(signature) is not str or _signature(signature) is None:
        _fail(INVALID_VALUE, field + ".sig", f"{field}.sig must be a 64-byte signature in standard base64")


def check_claims(claims: Any) -> dict[str, Any]:
    """The form of the router's claims (docs/record-format.md, "Record format v2")."""
    where = "decision.claims"
    if type(claims) is not dict:
        _fail(WRONG_TYPE, where, "decision.claims must be an object")
    if claims.keys() != set(CLAIM_FIELDS):
        _check_keys(claims, (*CLAIM_FIELDS, *(c for c in OPTIONAL_CLAIMS if c in claims)), where + ".")
    if SUPERSEDES in claims:
        _check_supersedes(claims)
    if QUEUED_US in claims:
        _uint(claims[QUEUED_US], f"{where}.{QUEUED_US}", QUEUED_US_LIMIT, 1)
    if FALLBACK_FROM in claims:
        _slug_field(claims[FALLBACK_FROM], f"{where}.{FALLBACK_FROM}")
        if claims[FALLBACK_FROM] == claims["subtree"]:
            _fail(
                INVALID_VALUE, f"{where}.{FALLBACK_FROM}", f"{where}.{FALLBACK_FROM} must be another subtree"
            )
    if type(claims["record_id"]) is not str or _uuid7(claims["record_id"]) is None:
        _fail(INVALID_VALUE, where + ".record_id", "decision.claims.record_id must be a UUIDv7")
    for name in ("router", "subtree", "executor"):
        _slug_field(claims[name], f"{where}.{name}")
    if claims["domain"] is not None:
        _slug_field(claims["domain"], where + ".domain")
    node = claims["node"]
    if type(node) is not str or _l1_node(node) is None:
        _fail(INVALID_VALUE, where + ".node", f"decision.claims.node must match {L1_NODE_PATTERN}")
    if type(claims["rules_sha256"]) is not str or _hex64(claims["rules_sha256"]) is None:
        _fail(INVALID_VALUE, where + ".rules_sha256", "decision.claims.rules_sha256 must be 64 lowercase hex")
    if claims["confidence_ppm"] is not None:
        _uint(claims["confidence_ppm"], where + ".confidence_ppm", CONFIDENCE_PPM_MAX + 1)
    if type(claims["l2_confirmation"]) is not bool:
        _fail(WRONG_TYPE, where + ".l2_confirmation", "decision.claims.l2_confirmation must be a boolean")
    path = claims["path"]
    if type(path) is not list or not 0 < len(path) <= PATH_MAX:
        _fail(INVALID_VALUE, where + ".path", f"decision.claims.path must be a list of 1..{PATH_MAX} layers")
    for layer in path:
        if type(layer) is not str or layer not in HOP_LAYERS:
            _fail(INVALID_VALUE, where + ".path", 'decision.claims.path holds only "L1", "L2" and "L3"')
    preheat = claims["preheat"]
    if type(preheat) is not list or len(preheat) > PREHEAT_MAX:
        _fail(
            INVALID_VALUE,
            where + ".preheat",
            f"decision.claims.preheat must be a list of at most {PREHEAT_MAX}",
        )
    for pair in preheat:
        if (
            type(pair) is not list
            or len(pair) != 2
            or not all(type(n) is int and 0 <= n < 65536 for n in pair)
        ):
            _fail(INVALID_VALUE, where + ".preheat", "decision.claims.preheat holds [layer, expert] pairs")
    _uint(claims["l1_in_us"], where + ".l1_in_us", U32)
    _uint(claims["decided_ns"], where + ".decided_ns", U63, 1)
    return claims


def _check_supersedes(claims: Mapping[str, Any]) -> None:
    where, superseded = "decision.claims.supersedes", claims[SUPERSEDES]
    if type(superseded) is not list or not 0 < len(superseded) <= SUPERSEDES_MAX:
        _fail(INVALID_VALUE, where, f"{where} must be a list of 1..{SUPERSEDES_MAX} record ids")
    if not all(type(r) is str and _uuid7(r) is not None for r in superseded):
        _fail(INVALID_VALUE, where, f"{where} holds UUIDv7 record ids")
    if len(set(superseded)) != len(superseded) or claims["record_id"] in superseded:
        _fail(INVALID_VALUE, where, f"{where} must be distinct earlier attempts, not this record")


def receipt_ns(claims: Mapping[str, Any]) -> int:
    """When the router received the request: the record's start."""
    return int(claims["decided_ns"]) - (int(claims["l1_in_us"]) + int(claims.get(QUEUED_US, 0))) * 1000


def check_decision_agrees(rec: Mapping[str, Any], claims: Mapping[str, Any]) -> None:
    """The record is the one the router decided (``decision_mismatch`` otherwise): its id, its
    executor, its start (the router's receipt: ``decided_ns`` − ``l1_in_us`` − ``queued_us``), its
    hops along the decided path (or the first L1 hop alone, for a request the executor refused), every
    L1 hop on the router's node, and the first hop at least as long as the router's part of it."""
    hops = rec["hops"]
    layers = [hop["layer"] for hop in hops]
    if claims["record_id"] != rec["record_id"]:
        _fail(DECISION_MISMATCH, "decision.claims.record_id", "the decision is for another record")
    if claims["executor"] != rec["agent_id"]:
        _fail(DECISION_MISMATCH, "decision.claims.executor", "the decision names another executor")
    if rec["start_ns"] != receipt_ns(claims):
        _fail(DECISION_MISMATCH, "start_ns", "start_ns must be decided_ns - (l1_in_us + queued_us) * 1000")
    if layers != claims["path"] and not (rec["status"] == "rejected" and layers == ["L1"]):
        _fail(DECISION_MISMATCH, "hops", "the hops must follow the decided path")
    if any(hop["node"] != claims["node"] for hop in hops if hop["layer"] == "L1"):
        _fail(DECISION_MISMATCH, "hops", "every L1 hop must be on the router's node")
    if hops[0]["latency_us"] < claims["l1_in_us"]:
        _fail(DECISION_MISMATCH, "hops[0].latency_us", "the first L1 hop must include the router's l1_in_us")


def parse_record_line(line: bytes) -> dict[str, Any]:
    """orjson-parse one wire line into an object, or raise ``malformed_record``."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise RecordError(MALFORMED_RECORD, None, f"not valid JSON: {exc}") from None
    if type(obj) is not dict:
        raise RecordError(MALFORMED_RECORD, None, "a record must be a JSON object")
    return obj


def check_record_canonical(line: bytes, rec: dict[str, Any]) -> None:
    """Raise ``non_canonical`` unless ``line`` is exactly the canonical encoding of ``rec``."""
    if not matches_canonical(line, rec):
        raise RecordError(NON_CANONICAL, None, "record line is not in canonical encoding")


def decode_record(line: bytes) -> dict[str, Any]:
    """Parse, validate and canonical-check one record line (ingest side).

    Validation runs before the canonical check so that agents get the precise reason
    (e.g. ``wrong_type`` for a float) rather than ``non_canonical``. Duplicate keys, whitespace,
    escapes like ``\\u00e9`` or unsorted keys all end up as ``non_canonical``.
    """
    rec = parse_record_line(line)
    validate_record(rec)
    check_record_canonical(line, rec)
    return rec
