"""Reads of the ledger: checkpoints, inclusion and consistency proofs, and the store audit.

Invoice exports, dispute evidence and invoice completeness are billing's (billing.exports,
billing.evidence, billing.completeness); an agent's completeness report is ingest's (ingest.selectors).
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Max, QuerySet

from clickhouse_store.queries.records import stored_lines
from treemeter_records import key_id_for, private_key_from_seed
from treemeter_records.merkle import leaf_hash

from .merkle import consistency_path, inclusion_path
from .models import Checkpoint, LogLeaf, LogState
from .notes import key_hash, raw_public_key, verifier_key
from .tree import StoredTree


class LedgerLookupError(Exception):
    """What was asked for does not exist (or is not the caller's): HTTP 404 / 409 with a code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def checkpoints() -> QuerySet[Checkpoint]:
    return Checkpoint.objects.all()


def log_head() -> tuple[int, datetime | None]:
    """The log's size and when its latest checkpoint was signed (None before the first)."""
    state = LogState.objects.filter(pk=1).values_list("size", flat=True).first()
    signed = Checkpoint.objects.order_by("-size", "-id").values_list("created_at", flat=True).first()
    return state or 0, signed


def checkpoint_of_size(size: int | None) -> Checkpoint:
    """The checkpoint for a tree size, or the latest one."""
    rows = Checkpoint.objects.order_by("-size", "-id")
    found = rows.filter(size=size).first() if size is not None else rows.first()
    if found is None:
        raise LedgerLookupError(404, "no_checkpoint", "No checkpoint of that size has been published.")
    return found


def covering_checkpoint(tenant: str, contract: str, start_ns: int, end_ns: int) -> Checkpoint | None:
    """The first signed checkpoint that covers every logged record of the contract that started in
    [start_ns, end_ns): a checkpoint of size n covers leaves 0 … n−1, so the first whose size exceeds the
    highest such leaf index. None while no record is logged there, or no checkpoint covers them yet."""
    last = LogLeaf.objects.filter(
        tenant=tenant, contract=contract, start_ns__gte=start_ns, start_ns__lt=end_ns
    ).aggregate(last=Max("index"))["last"]
    if last is None:
        return None
    return Checkpoint.objects.filter(size__gt=last).order_by("size", "id").first()


def checkpoint_public_key() -> bytes:
    """The raw Ed25519 public key that signs the checkpoints (its name is settings.LEDGER_ORIGIN)."""
    return raw_public_key(private_key_from_seed(settings.PLATFORM_SIGNING_KEY))


def checkpoint_keys() -> dict[str, str]:
    """How the checkpoints' signing key is named, both ways, so that no one confuses them: the C2SP
    signed-note verifier key a witness or ``treemeter-verify`` pins (``name+hash+base64``), whose
    ``note_key_hash`` (4 bytes, hex) leads each signature line; and the record format's ``key_id``
    (``ed25519:`` + 16 hex of SHA-256 of the key), which names the same key in the platform's signed
    JSON (entitlement snapshots)."""
    public_key = checkpoint_public_key()
    return {
        "origin": settings.LEDGER_ORIGIN,
        "note_verifier_key": verifier_key(settings.LEDGER_ORIGIN, public_key),
        "note_key_hash": key_hash(settings.LEDGER_ORIGIN, public_key).hex(),
        "key_id": key_id_for(public_key),
        "public_key": base64.b64encode(public_key).decode(),
    }


def checkpoint_json(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        "size": checkpoint.size,
        "root_hash": b64(bytes(checkpoint.root_hash)),
        "note": checkpoint.note,
        "reason": checkpoint.reason,
        "created_at": checkpoint.created_at.isoformat(),
    }


def inclusion_proof(record_id: str, size: int | None, tenant: str | None) -> dict[str, Any]:
    """The RFC 6962 audit path of a record's (first) leaf against a checkpoint."""
    leaves = LogLeaf.objects.filter(record_id=record_id)
    if tenant is not None:
        leaves = leaves.filter(tenant=tenant)
    leaf = leaves.order_by("index").first()
    if leaf is None:
        raise LedgerLookupError(404, "unknown_record", f"No logged record {record_id}.")
    checkpoint = checkpoint_of_size(size)
    if leaf.index >= checkpoint.size:
        raise LedgerLookupError(
            409, "not_yet_checkpointed", f"Record {record_id} was logged after checkpoint {checkpoint.size}."
        )
    path = inclusion_path(leaf.index, checkpoint.size, StoredTree(checkpoint.size).subtree)
    return {
        "record_id": record_id,
        "leaf_index": leaf.index,
        "leaf_hash": b64(bytes(leaf.leaf_hash)),
        "tree_size": checkpoint.size,
        "proof": [b64(h) for h in path],
        "checkpoint": checkpoint.note,
    }


def consistency_proof(old: int, new: int) -> dict[str, Any]:
    """The RFC 9162 consistency proof from any tree size ``old`` (0 included: an empty proof) up to the
    signed checkpoint of size ``new``, with that checkpoint and, where one was published at ``old``,
    the older one (None otherwise: the caller holds the root it saw at that size)."""
    second = checkpoint_of_size(new)
    if not 0 <= old <= second.size:
        raise LedgerLookupError(
            400, "sizes_reversed", "The first size must be between 0 and the checkpoint's size."
        )
    first = Checkpoint.objects.filter(size=old).order_by("-id").first()
    path = consistency_path(old, second.size, StoredTree(second.size).subtree) if old else []
    return {
        "from_size": old,
        "to_size": second.size,
        "proof": [b64(h) for h in path],
        "from_checkpoint": None if first is None else first.note,
        "to_checkpoint": second.note,
    }


def consistency_entry(old: int, new: int, tree: StoredTree) -> dict[str, Any]:
    """The consistency proof from size ``old`` to ``new`` of a stored tree, as an export carries it."""
    if not 0 <= old <= new:
        raise LedgerLookupError(400, "bad_previous_size", f"No consistency proof from size {old} to {new}.")
    return {"from_size": old, "proof": [b64(h) for h in consistency_path(old, new, tree.subtree)]}


def audit_store(tenant: str, contract: str, start_ns: int, end_ns: int) -> dict[str, list[str]]:
    """Compare the stored records with the log: changed, missing (deleted) and unlogged (inserted) ids."""
    lines = stored_lines(tenant, contract, start_ns, end_ns)
    logged = {
        str(record_id): bytes(h)
        for record_id, h in LogLeaf.objects.filter(
            tenant=tenant, contract=contract, start_ns__gte=start_ns, start_ns__lt=end_ns
        ).values_list("record_id", "leaf_hash")
    }
    return {
        "changed": sorted(k for k, line in lines.items() if k in logged and leaf_hash(line) != logged[k]),
        "missing": sorted(k for k in logged if k not in lines),
        "unlogged": sorted(k for k in lines if k not in logged),
    }
