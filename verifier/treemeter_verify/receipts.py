"""A per-request receipt checked offline (``treemeter-verify receipt``), with this verifier's own code.

A receipt token is unpadded base64url of the canonical JSON ``{"claims", "key_id", "sig"}``; ``sig`` is
the agent's Ed25519 signature over ``treemeter-receipt-v1\\n`` + the canonical claims; the claims name the
record id, agent, seq, tenant, contract, start and the leaf hash (hex SHA-256(0x00 ‖ canonical record)).

Its record is then proved in the log either by the platform's answer to ``POST
/v1/ledger/receipts/check`` (the record's canonical line, an inclusion proof and the signed checkpoint),
or by an invoice export that holds the record (the whole export verified as ``treemeter-verify`` does).
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import UTC, datetime
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .canonical import canonical_bytes
from .check import Report, read_export, verify_export
from .keys import PinnedKeys
from .merkle import ProofError, leaf_hash, root_from_inclusion
from .note import NoteError, open_checkpoint
from .rating import CACHE_WRITES

DOMAIN = b"treemeter-receipt-v1\n"
CLAIMS = {"v", "record_id", "agent_id", "seq", "leaf_hash", "tenant", "contract", "start_ns"}


class ReceiptError(ValueError):
    """The text is not a receipt."""


def read_receipt(token: str) -> dict[str, Any]:
    """``{"claims", "key_id", "sig"}`` of a receipt token, its shape checked."""
    text = token.strip()
    try:
        envelope = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError):
        raise ReceiptError("not a receipt: not base64url of JSON") from None
    if not isinstance(envelope, dict) or set(envelope) != {"claims", "key_id", "sig"}:
        raise ReceiptError("not a receipt: it holds exactly claims, key_id and sig")
    claims = envelope["claims"]
    if not isinstance(claims, dict) or set(claims) != CLAIMS or claims["v"] != 1:
        raise ReceiptError(f"not a version 1 receipt: its claims are {', '.join(sorted(CLAIMS))}")
    return envelope


def _signature_problems(receipt: dict[str, Any], keys: PinnedKeys) -> list[str]:
    raw = keys.agents.get(receipt["key_id"])
    if raw is None:
        return [f"signed by {receipt['key_id']}, which is not a pinned agent key"]
    try:
        signature = base64.b64decode(receipt["sig"], validate=True)
        Ed25519PublicKey.from_public_bytes(raw).verify(signature, DOMAIN + canonical_bytes(receipt["claims"]))
    except (InvalidSignature, binascii.Error, ValueError, TypeError):
        return [f"the signature by {receipt['key_id']} does not verify"]
    return []


def _record_problems(claims: dict[str, Any], line: bytes) -> list[str]:
    """The line must hash to the receipt's leaf, and name the receipt's record."""
    problems = []
    if leaf_hash(line).hex() != claims["leaf_hash"]:
        problems.append(
            f"the record's leaf hash is {leaf_hash(line).hex()}, the receipt's {claims['leaf_hash']}"
        )
    record = json.loads(line)
    for name in ("record_id", "agent_id", "seq", "tenant", "contract", "start_ns"):
        if record.get(name) != claims[name]:
            problems.append(f"the record's {name} is {record.get(name)!r}, the receipt's {claims[name]!r}")
    return problems


def verify_signature_only(receipt: dict[str, Any], keys: PinnedKeys) -> Report:
    """Only the agent's signature: the receipt is authentic (whether its record was logged needs a proof)."""
    report = Report(records=0)
    report.add(
        "receipt signature", _signature_problems(receipt, keys), f"signed by agent key {receipt['key_id']}"
    )
    return report


def verify_with_proof(
    receipt: dict[str, Any], answer: dict[str, Any], keys: PinnedKeys
) -> tuple[Report, bytes | None]:
    """The receipt against the platform's check answer; returns the report and the record's line."""
    report = Report(records=1)
    claims = receipt["claims"]
    report.add(
        "receipt signature", _signature_problems(receipt, keys), f"signed by agent key {receipt['key_id']}"
    )
    same = answer.get("claims") == claims and answer.get("key_id") == receipt["key_id"]
    report.add(
        "answer", [] if same else ["the answer is about another receipt"], "the answer names this receipt"
    )
    if answer.get("line") is None or answer.get("inclusion") is None:
        report.add("inclusion", [f"the platform answers {answer.get('status')!r}: no record and proof"], "")
        return report, None
    line = str(answer["line"]).encode()
    report.add("record", _record_problems(claims, line), "the record hashes to the receipt's leaf")
    inclusion = answer["inclusion"]
    problems = []
    try:
        checkpoint = open_checkpoint(inclusion["checkpoint"], keys.platform)
        path = [base64.b64decode(h, validate=True) for h in inclusion["proof"]]
        if checkpoint.size != inclusion["tree_size"]:
            problems.append(
                f"the proof is for size {inclusion['tree_size']}, the checkpoint's {checkpoint.size}"
            )
        root = root_from_inclusion(inclusion["leaf_index"], checkpoint.size, leaf_hash(line), path)
        if root != checkpoint.root_hash:
            problems.append("the inclusion proof does not lead to the checkpoint's root")
    except (NoteError, ProofError, binascii.Error, ValueError, KeyError, TypeError) as error:
        problems.append(f"the proof cannot be checked: {error}")
    good = f"leaf {inclusion.get('leaf_index')} of the signed checkpoint of size {inclusion.get('tree_size')}"
    report.add("inclusion", problems, good)
    return report, line


def verify_with_export(receipt: dict[str, Any], body: bytes, keys: PinnedKeys) -> tuple[Report, bytes | None]:
    """The receipt against an invoice export holding its record: the export verified whole, then the
    record's line found in it and matched to the receipt."""
    report = Report(records=1)
    claims = receipt["claims"]
    report.add(
        "receipt signature", _signature_problems(receipt, keys), f"signed by agent key {receipt['key_id']}"
    )
    manifest, lines = read_export(body)
    exported = verify_export(manifest, lines, keys)
    failed = [f"{v.check}: {v.detail}" for v in exported.verdicts if not v.ok]
    report.add("export", failed, f"the export verifies ({exported.records} records)")
    marker = f'"record_id":"{claims["record_id"]}"'.encode()
    line = next((line for line in lines if marker in line), None)
    if line is None:
        report.add("record", [f"the export holds no record {claims['record_id']}"], "")
        return report, None
    report.add("record", _record_problems(claims, line), "the export's record hashes to the receipt's leaf")
    return report, line


def billed_dimensions(line: bytes) -> list[tuple[str, str]]:
    """What the record says was done and is billed on, one (name, value) per row."""
    record = json.loads(line)
    experts = record.get("experts", [])
    hops = " → ".join(f"{h['layer']} {h['latency_us']} µs" for h in record.get("hops", []))
    start = datetime.fromtimestamp(record["start_ns"] / 1e9, UTC).isoformat(timespec="milliseconds")
    return [
        ("record", f"{record['record_id']} (agent {record['agent_id']}, seq {record['seq']})"),
        ("contract", f"{record['tenant']}/{record['contract']} package {record['package']}"),
        ("started", start),
        ("model", record["model_id"]),
        ("status", record["status"]),
        ("tokens in / out", f"{record['tokens_in']} / {record['tokens_out']}"),
        ("cached prompt tokens", str(record["prefix_cache_hit_tokens"])),
        ("prompt tokens written to the prefix cache", str(record.get(CACHE_WRITES, 0))),  # absent: 0
        (
            "experts",
            f"{len(experts)} (layer, expert) pairs, {sum(e['tokens'] for e in experts)} tokens routed",
        ),
        ("expert cache hits / misses", f"{record['expert_cache_hits']} / {record['expert_cache_misses']}"),
        ("hops", hops),
    ]
