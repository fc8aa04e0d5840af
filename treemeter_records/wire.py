"""The compiled fast path of record validation: a raw wire line decoded straight into a msgspec Struct.

``validation.validate_record`` is the reference definition (docs/record-format.md, every rule with its
error). This module proves a line valid without building a dict per record: msgspec decodes the line
in C into ``WireRecord`` (types, key set, ranges, enums, slugs, lengths; booleans are not integers),
re-encoding it gives the canonical bytes to compare with the line (the fields are declared in canonical
key order), and what msgspec cannot express (experts sorted and unique, the sums, ``end_ns`` after
``start_ns``, ``prefix_cache_hit_tokens`` + ``prefix_cache_write_tokens`` within ``tokens_in``, no
control characters, ``outcome``'s rules) is checked after it. The optional ``prefix_cache_write_tokens``
defaults to 0 and is left out when encoded at 0 (``omit_defaults``), so a line without it re-encodes to
itself, and a line that writes it as 0 fails its ``ge=1`` and takes the reference path. The Structs
are not tracked by the garbage collector, so a 10k-record batch adds nothing for it to walk.

The fast path only ever accepts: when it cannot prove a line valid (``fast_record`` answers None), the
line takes the reference path, which names the seq, the field and the rule. Text with characters
``str.isprintable`` refuses (tab, newline, U+2028...) is such a case; the reference decides it. A
hypothesis test (tests/records/test_records_wire.py) checks that both accept and reject exactly the same
lines.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
import orjson
from msgspec import Meta, Struct

from .encoding import matches_canonical
from .errors import RecordError
from .limits import NODE_MAX, SLUG_MAX, TEXT_MAX
from .validation import (
    CONFIDENCE_PPM_MAX,
    KEY_ID_PATTERN,
    L1_NODE_PATTERN,
    PATH_MAX,
    PREHEAT_MAX,
    QUEUED_US_LIMIT,
    SIGNATURE_PATTERN,
    SUPERSEDES_MAX,
    UUID7_PATTERN,
    check_outcome,
)

_INT63 = 2**63 - 1
_UINT32 = 2**32 - 1
Slug = Annotated[str, Meta(pattern=rf"^[a-z0-9][a-z0-9._-]{{0,{SLUG_MAX - 1}}}\Z")]
U32 = Annotated[int, Meta(ge=0, le=_UINT32)]
U63 = Annotated[int, Meta(ge=0, le=_INT63)]
Positive63 = Annotated[int, Meta(ge=1, le=_INT63)]
U16 = Annotated[int, Meta(ge=0, le=65535)]


class WireHop(Struct, forbid_unknown_fields=True, gc=False):
    """One hop; fields in canonical key order."""

    latency_us: U32
    layer: Literal["L1", "L2", "L3"]
    node: Annotated[str, Meta(min_length=1, max_length=NODE_MAX)]


class WireExpert(Struct, forbid_unknown_fields=True, gc=False):
    """One (layer, expert, tokens) entry; fields in canonical key order."""

    expert: U16
    layer: U16
    tokens: Annotated[int, Meta(ge=1, le=_UINT32)]


KeyId = Annotated[str, Meta(pattern=rf"^{KEY_ID_PATTERN}\Z")]
Signature = Annotated[str, Meta(pattern=rf"^{SIGNATURE_PATTERN}\Z")]
RecordId = Annotated[str, Meta(pattern=rf"^{UUID7_PATTERN}\Z")]
Layer = Literal["L1", "L2", "L3"]


class WireClaims(Struct, forbid_unknown_fields=True, gc=False, omit_defaults=True, kw_only=True):
    """A v2 record's router claims; fields in canonical key order (``supersedes`` only on a retry,
    ``queued_us`` on a job, ``fallback_from`` while the decided subtree's breaker is open)."""

    confidence_ppm: Annotated[int, Meta(ge=0, le=CONFIDENCE_PPM_MAX)] | None
    decided_ns: Positive63
    domain: Slug | None
    executor: Slug
    fallback_from: Slug | None = None
    l1_in_us: U32
    l2_confirmation: bool
    node: Annotated[str, Meta(pattern=rf"^{L1_NODE_PATTERN}\Z")]
    path: Annotated[tuple[Layer, ...], Meta(min_length=1, max_length=PATH_MAX)]
    preheat: Annotated[tuple[tuple[U16, U16], ...], Meta(max_length=PREHEAT_MAX)]
    queued_us: Annotated[int, Meta(ge=1, lt=QUEUED_US_LIMIT)] | None = None
    record_id: RecordId
    router: Slug
    rules_sha256: Annotated[str, Meta(pattern=r"^[0-9a-f]{64}\Z")]
    subtree: Slug
    supersedes: Annotated[tuple[RecordId, ...], Meta(max_length=SUPERSEDES_MAX)] = ()


class WireDecision(Struct, forbid_unknown_fields=True, gc=False):
    claims: WireClaims
    key_id: KeyId
    sig: Signature


class WireSignature(Struct, forbid_unknown_fields=True, gc=False):
    key_id: KeyId
    sig: Signature


class WireRecord(Struct, forbid_unknown_fields=True, gc=False, kw_only=True, omit_defaults=True):
    """A v1 or v2 record as decoded from its wire line; fields in canonical key order (see the module
    doc). v1 lines have no ``decision`` and ``executor_sig`` (None here, and left out when encoded); a
    line without ``prefix_cache_write_tokens`` has 0 here (left out when encoded)."""

    agent_id: Slug
    client_request_id: Annotated[str, Meta(max_length=TEXT_MAX)]
    clock_drift_us: Annotated[int, Meta(gt=-(2**31), lt=2**31)]
    contract: Slug
    decision: WireDecision | None = None
    distinct_experts: U63
    end_ns: Positive63
    executor_sig: WireSignature | None = None
    expert_cache_hits: U32
    expert_cache_misses: U32
    expert_tokens: U63
    experts: tuple[WireExpert, ...]
    hops: Annotated[tuple[WireHop, ...], Meta(min_length=1)]
    model_id: Annotated[str, Meta(min_length=1, max_length=TEXT_MAX)]
    outcome: msgspec.Raw
    package: Slug
    prefix_cache_hit_tokens: U32
    prefix_cache_write_tokens: Annotated[int, Meta(ge=1, le=_UINT32)] = 0
    record_id: RecordId
    seq: U63
    sla_class: Slug
    start_ns: Positive63
    status: Literal["ok", "error", "timeout", "rejected", "cancelled"]
    tenant: Slug
    tokens_in: U32
    tokens_out: U32
    v: Annotated[int, Meta(ge=1, le=2)]
    weights_sha3: Annotated[str, Meta(pattern=r"^[0-9a-f]{64}\Z")]


_decode = msgspec.json.Decoder(WireRecord).decode
_encode = msgspec.json.Encoder().encode
_NULL = b"null"


def fast_record(line: bytes) -> WireRecord | None:
    """The record of a line proven valid and canonical, or None when the reference must decide."""
    try:
        rec = _decode(line)
    except (msgspec.DecodeError, RecursionError):  # ValidationError included; RecursionError: deep nesting
        return None
    if _encode(rec) != line:
        return None
    experts = rec.experts
    previous = -1
    total = 0
    for entry in experts:
        key = (entry.layer << 16) | entry.expert
        if key <= previous:
            return None
        previous = key
        total += entry.tokens
    if (
        rec.end_ns < rec.start_ns
        or rec.distinct_experts != len(experts)
        or rec.expert_tokens != total
        or rec.prefix_cache_hit_tokens + rec.prefix_cache_write_tokens > rec.tokens_in
        or not (rec.client_request_id + rec.model_id).isprintable()
    ):
        return None
    for hop in rec.hops:
        if not hop.node.isprintable():
            return None
    if (rec.v == 2) != (rec.decision is not None) or (rec.v == 2) != (rec.executor_sig is not None):
        return None
    if rec.decision is not None and not _agrees(rec, rec.decision.claims):
        return None
    superseded = rec.decision.claims.supersedes if rec.decision is not None else ()
    if superseded and (len(set(superseded)) != len(superseded) or rec.record_id in superseded):
        return None
    raw = bytes(rec.outcome)
    if raw != _NULL and not _outcome_valid(raw):
        return None
    return rec


def _agrees(rec: WireRecord, claims: WireClaims) -> bool:
    """``validation.check_decision_agrees``, on the Structs."""
    hops = rec.hops
    layers = tuple(hop.layer for hop in hops)
    return (
        claims.record_id == rec.record_id
        and claims.executor == rec.agent_id
        and rec.start_ns == claims.decided_ns - (claims.l1_in_us + (claims.queued_us or 0)) * 1000
        and (layers == claims.path or (rec.status == "rejected" and layers == ("L1",)))
        and all(hop.node == claims.node for hop in hops if hop.layer == "L1")
        and hops[0].latency_us >= claims.l1_in_us
        and claims.fallback_from != claims.subtree
    )


def _outcome_valid(raw: bytes) -> bool:
    try:
        value = orjson.loads(raw)
        check_outcome(value)
    except (orjson.JSONDecodeError, RecordError):
        return False
    return type(value) is dict and matches_canonical(raw, value)


def decode_wire(line: bytes) -> WireRecord:
    """The ``WireRecord`` of a line the reference found valid (e.g. with a newline in
    ``client_request_id``, which the fast path leaves to it): every Struct constraint is one of its rules."""
    return _decode(line)
