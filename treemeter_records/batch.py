"""Signed batches: building (agent side) and parsing/verifying (ingest side).

Wire format (``application/x-ndjson``): line 1 is the canonical envelope
``{"header": ..., "signature": <base64>}``, then one canonical record per line, ``\\n``-separated
(a single trailing newline is allowed).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import itertools
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from .encoding import canonical_bytes, matches_canonical
from .errors import (
    BAD_SIGNATURE,
    BATCH_TOO_LARGE,
    HEADER_MISMATCH,
    INVALID_VALUE,
    MALFORMED_BATCH,
    MERKLE_MISMATCH,
    BatchError,
    RecordError,
)
from .merkle import LEAF_PREFIX, merkle_root
from .signing import PublicKeyLike, key_id_for, sign_header, verify_signature
from .validation import check_record_canonical, is_slug, parse_record_line, validate_record
from .wire import WireRecord, decode_wire, fast_record

BATCH_VERSION = 1
CONTENT_TYPE = "application/x-ndjson"
HEADER_FIELDS: tuple[str, ...] = (
    "v",
    "agent_id",
    "key_id",
    "first_seq",
    "last_seq",
    "count",
    "merkle_root",
    "created_ns",
)
_HEADER_SET = frozenset(HEADER_FIELDS)
_ENVELOPE_SET = frozenset({"header", "signature"})
_U63 = 2**63
_key_id = re.compile(r"ed25519:[0-9a-f]{16}").fullmatch
_hex64 = re.compile(r"[0-9a-f]{64}").fullmatch
_sha256 = hashlib.sha256
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class SignedBatch:
    """A batch ready to send: header, base64 signature and the canonical record lines."""

    header: dict[str, Any]
    signature: str
    lines: tuple[bytes, ...]

    @property
    def header_bytes(self) -> bytes:
        return canonical_bytes(self.header)

    @property
    def header_digest(self) -> str:
        """Hex SHA-256 of the canonical header bytes: a stable batch id (the server's ``batch``)."""
        return _sha256(self.header_bytes).hexdigest()

    def body(self) -> bytes:
        envelope = canonical_bytes({"header": self.header, "signature": self.signature})
        return b"\n".join((envelope, *self.lines)) + b"\n"


def build_batch(
    records: Sequence[dict[str, Any]],
    agent_id: str,
    private_key: Ed25519PrivateKey,
    *,
    created_ns: int | None = None,
) -> SignedBatch:
    """Validate, order by ``seq``, encode, Merkle-hash and sign records into a batch.

    Raises ``RecordError`` for an invalid record, a record of another agent or a repeated seq,
    and ``ValueError`` for an empty batch or a bad ``agent_id``.
    """
    if not records:
        raise ValueError("a batch carries at least one record")
    if not is_slug(agent_id):
        raise ValueError(f"invalid agent_id {agent_id!r}")
    for rec in records:
        validate_record(rec)
        if rec["agent_id"] != agent_id:
            raise RecordError(INVALID_VALUE, "agent_id", f"record belongs to another agent than {agent_id}")
    ordered = sorted(records, key=lambda r: r["seq"])
    for prev, cur in itertools.pairwise(ordered):
        if cur["seq"] == prev["seq"]:
            raise RecordError(INVALID_VALUE, "seq", f"seq {cur['seq']} appears twice in the batch")
    lines = tuple(canonical_bytes(r) for r in ordered)
    header = {
        "v": BATCH_VERSION,
        "agent_id": agent_id,
        "key_id": key_id_for(private_key),
        "first_seq": ordered[0]["seq"],
        "last_seq": ordered[-1]["seq"],
        "count": len(lines),
        "merkle_root": merkle_root([_sha256(LEAF_PREFIX + line).digest() for line in lines]).hex(),
        "created_ns": time.time_ns() if created_ns is None else created_ns,
    }
    return SignedBatch(header=header, signature=sign_header(header, private_key), lines=lines)


@dataclass(frozen=True, slots=True)
class ParsedBatch:
    """A structurally valid batch as received; record lines stay raw bytes."""

    header: dict[str, Any]
    header_bytes: bytes  # canonical bytes of the header (what is signed)
    signature: bytes  # raw 64-byte Ed25519 signature
    lines: list[bytes]

    @property
    def header_digest(self) -> str:
        return _sha256(self.header_bytes).hexdigest()

    @property
    def agent_id(self) -> str:
        return str(self.header["agent_id"])

    @property
    def key_id(self) -> str:
        return str(self.header["key_id"])


def _malformed(message: str) -> BatchError:
    return BatchError(MALFORMED_BATCH, message)


def _check_header(header: Any) -> dict[str, Any]:
    if type(header) is not dict:
        raise _malformed("header must be an object")
    if header.keys() != _HEADER_SET:
        missing = sorted(_HEADER_SET - header.keys())
        extra = sorted(str(k) for k in header.keys() - _HEADER_SET)
        raise _malformed(f"header fields: missing {missing}, unknown {extra}")
    for name in ("v", "first_seq", "last_seq", "count", "created_ns"):
        value = header[name]
        if type(value) is not int or not 0 <= value < _U63:
            raise _malformed(f"header {name} must be an integer in [0, 2**63)")
    if header["v"] != BATCH_VERSION:
        raise _malformed(f"unsupported batch version {header['v']}")
    if not is_slug(header["agent_id"]):
        raise _malformed("header agent_id is not a valid agent id")
    key_id = header["key_id"]
    if type(key_id) is not str or _key_id(key_id) is None:
        raise _malformed("header key_id must look like ed25519:<16 hex>")
    root = header["merkle_root"]
    if type(root) is not str or _hex64(root) is None:
        raise _malformed("header merkle_root must be 64 lowercase hex characters")
    if header["created_ns"] == 0:
        raise _malformed("header created_ns must be positive")
    return header


def parse_batch(body: bytes, max_records: int) -> ParsedBatch:
    """Split and strictly parse a batch body; record lines are not decoded here.

    Raises ``BatchError``: ``malformed_batch`` (bad envelope/header/signature encoding, empty
    lines, no records), ``batch_too_large`` (more than ``max_records`` records) or
    ``header_mismatch`` (count/first_seq/last_seq impossible for the lines received).
    """
    lines = body.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    if len(lines) < 2:
        raise _malformed("a batch is a header line followed by at least one record line")
    head, records = lines[0], lines[1:]
    if len(records) > max_records:
        raise BatchError(BATCH_TOO_LARGE, f"{len(records)} records exceed the limit of {max_records}")
    if b"" in records:
        raise _malformed("empty line in batch body")
    try:
        envelope = orjson.loads(head)
    except orjson.JSONDecodeError as exc:
        raise _malformed(f"header line is not valid JSON: {exc}") from None
    if type(envelope) is not dict or envelope.keys() != _ENVELOPE_SET:
        raise _malformed('header line must be {"header": {...}, "signature": "..."}')
    header = _check_header(envelope["header"])
    signature_b64 = envelope["signature"]
    if type(signature_b64) is not str:
        raise _malformed("signature must be a base64 string")
    try:
        signature = base64.b64decode(signature_b64, validate=True)
    except (binascii.Error, ValueError):
        raise _malformed("signature is not valid base64") from None
    if len(signature) != 64 or base64.b64encode(signature).decode("ascii") != signature_b64:
        raise _malformed("signature must be the standard base64 of 64 bytes")
    if not matches_canonical(head, envelope):
        raise _malformed("header line is not in canonical encoding")
    count, first_seq, last_seq = header["count"], header["first_seq"], header["last_seq"]
    if count != len(records):
        raise BatchError(HEADER_MISMATCH, f"header count {count} but {len(records)} record lines")
    if first_seq > last_seq or last_seq - first_seq + 1 < count:
        raise BatchError(HEADER_MISMATCH, "first_seq/last_seq cannot hold count distinct increasing seqs")
    return ParsedBatch(
        header=header, header_bytes=canonical_bytes(header), signature=signature, lines=records
    )


def verify_batch_signature(parsed: ParsedBatch, public_key: PublicKeyLike) -> bool:
    """True when ``public_key`` is the header's ``key_id`` and signed this header."""
    try:
        if key_id_for(public_key) != parsed.header["key_id"]:
            return False
    except ValueError:
        return False
    return verify_signature(parsed.header_bytes, parsed.signature, public_key)


def check_batch_signature(parsed: ParsedBatch, public_key: PublicKeyLike) -> None:
    """Raise ``BatchError(bad_signature, 401)`` unless ``verify_batch_signature`` holds."""
    if not verify_batch_signature(parsed, public_key):
        raise BatchError(BAD_SIGNATURE, "batch signature does not verify with the agent's key")


def check_merkle_root(parsed: ParsedBatch) -> list[bytes]:
    """Hash the raw record lines (no re-encoding) and compare with the header's root.

    Returns the leaf hashes in batch order (handy to store for inclusion proofs).
    Raises ``BatchError(merkle_mismatch)``.
    """
    leaves = [_sha256(LEAF_PREFIX + line).digest() for line in parsed.lines]
    if not hmac.compare_digest(merkle_root(leaves), bytes.fromhex(parsed.header["merkle_root"])):
        raise BatchError(MERKLE_MISMATCH, "records do not hash to the header's merkle_root")
    return leaves


@dataclass(slots=True)
class BatchRecords(Generic[R]):
    """Outcome of ``validate_batch_records`` (records as dicts) and ``read_batch_records`` (as
    ``WireRecord``).

    ``valid``: ``(seq, record)`` pairs in batch order; ``valid_index``: each one's 0-based line
    index (parallel list, to reach its raw line / leaf hash); ``problems``: one dict per rejected
    record ``{index, seq, record_id, code, field, message}`` (seq/record_id are None when not
    readable).
    """

    valid: list[tuple[int, R]] = field(default_factory=list)
    valid_index: list[int] = field(default_factory=list)
    problems: list[dict[str, Any]] = field(default_factory=list)


def validate_batch_records(parsed: ParsedBatch) -> BatchRecords[dict[str, Any]]:
    """Decode and validate every record line in one pass, by the reference definition.

    Invalid records are reported individually; the batch itself is refused
    (``header_mismatch``) when a readable record belongs to another agent, seqs are not strictly
    increasing, or the first/last line's seq differs from the header's first_seq/last_seq.
    """
    out: BatchRecords[dict[str, Any]] = BatchRecords()
    _sort_lines(parsed, out, None)
    return out


def read_batch_records(parsed: ParsedBatch) -> BatchRecords[WireRecord]:
    """``validate_batch_records`` on the compiled fast path (``wire``): the same valid lines, problems
    and batch errors, with each valid record a ``WireRecord`` instead of a dict (ingest's hot path)."""
    out: BatchRecords[WireRecord] = BatchRecords()
    _sort_lines(parsed, out, fast_record)
    return out


def _sort_lines(
    parsed: ParsedBatch, out: BatchRecords[Any], fast: Callable[[bytes], WireRecord | None] | None
) -> None:
    header = parsed.header
    agent_id = header["agent_id"]
    first_seq, last_seq = header["first_seq"], header["last_seq"]
    valid, valid_index, problems = out.valid, out.valid_index, out.problems
    prev_seq = -1
    last = len(parsed.lines) - 1
    for i, line in enumerate(parsed.lines):
        wire = None if fast is None else fast(line)
        if wire is not None:  # proven valid: only the batch-level rules are left
            if wire.agent_id != agent_id:
                raise BatchError(HEADER_MISMATCH, f"line {i + 1}: record of agent {wire.agent_id!r}")
            _check_seq(i, wire.seq, prev_seq, first_seq, last_seq, last)
            prev_seq = wire.seq
            valid.append((wire.seq, wire))
            valid_index.append(i)
            continue
        rec: Any = None
        try:
            rec = parse_record_line(line)
            validate_record(rec)
            check_record_canonical(line, rec)
            ok = True
        except RecordError as exc:
            ok = False
            error = exc
        seq: Any = rec.get("seq") if type(rec) is dict else None
        if type(seq) is not int or not 0 <= seq < _U63:
            seq = None  # unreadable: the record is rejected on its own, ordering is not checked
        if type(rec) is dict:
            rec_agent = rec.get("agent_id")
            if type(rec_agent) is str and rec_agent != agent_id:
                raise BatchError(HEADER_MISMATCH, f"line {i + 1}: record of agent {rec_agent[:64]!r}")
        if seq is not None:
            _check_seq(i, seq, prev_seq, first_seq, last_seq, last)
            prev_seq = seq
        if ok:
            valid.append((seq, rec if fast is None else decode_wire(line)))
            valid_index.append(i)
        else:
            record_id = rec.get("record_id") if type(rec) is dict else None
            problems.append(
                {
                    "index": i,
                    "seq": seq,
                    "record_id": record_id if type(record_id) is str else None,
                    "code": error.code,
                    "field": error.field,
                    "message": error.message,
                }
            )


def _check_seq(i: int, seq: int, prev_seq: int, first_seq: int, last_seq: int, last: int) -> None:
    if seq <= prev_seq:
        raise BatchError(HEADER_MISMATCH, f"line {i + 1}: seq {seq} is not above {prev_seq}")
    if (i == 0 and seq != first_seq) or (i == last and seq != last_seq) or not (first_seq <= seq <= last_seq):
        raise BatchError(HEADER_MISMATCH, f"line {i + 1}: seq {seq} disagrees with the header range")
