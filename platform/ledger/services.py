"""Writes to the ledger: keep signed batches, append accepted records, publish signed checkpoints,
persist gap events. Disputes of invoice lines are billing's (billing.disputes).

Retry semantics: ``append_batch`` runs inside the ingest transaction, after the batch's answer is
saved; a replayed batch returns before it, so every accepted record is appended exactly once, in
ingest order (the LogState row lock serialises appends). A crash before commit appends nothing.
``publish_checkpoint`` is safe to repeat: it signs only a tree that extends the last checkpoint.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from agents.models import Agent
from treemeter_records import private_key_from_seed
from webhooks.services import publish_event

from .merkle import ProofError, append_leaves, consistency_path, fold, verify_consistency
from .models import STRATUM, Checkpoint, LedgerEvent, LogBatch, LogLeaf, LogNode, LogState
from .notes import CheckpointBody, sign_checkpoint
from .tree import StoredTree


@dataclass(frozen=True)
class AcceptedRecord:
    """A record ingest stored: its line in the batch and what the log indexes it by."""

    position: int
    seq: int
    record_id: str
    tenant: str
    contract: str
    start_ns: int


class CheckpointRefused(Exception):
    """The current tree does not extend the last signed checkpoint: nothing is signed."""


def _split(blob: bytes) -> list[bytes]:
    return [blob[i : i + 32] for i in range(0, len(blob), 32)]


def log_state(lock: bool = False) -> LogState:
    LogState.objects.get_or_create(pk=1)
    rows = LogState.objects.select_for_update() if lock else LogState.objects
    return rows.get(pk=1)


def keep_signed_batch(
    agent_id: int,
    body: bytes,
    header: bytes,
    signature: bytes,
    leaves: Sequence[bytes],
    first_seq: int,
    last_seq: int,
    line_seqs: list[int],
) -> LogBatch:
    """Keep a received batch as the agent signed it (the first write of ingest's transaction for it):
    the header, the signature, the SHA-256 of the raw body and the leaf hashes of all its lines."""
    return LogBatch.objects.create(
        agent_id=agent_id,
        header=header,
        signature=signature,
        body_sha256=hashlib.sha256(body).hexdigest(),
        leaf_hashes=b"".join(leaves),
        first_seq=first_seq,
        last_seq=last_seq,
        seqs=line_seqs if len(leaves) < last_seq - first_seq + 1 else None,
    )


def append_batch(log_batch: LogBatch, accepted: list[AcceptedRecord]) -> None:
    """Append the accepted records' leaves (already hashed by ingest from the raw lines, kept in
    ``log_batch``) in order: the tree's new nodes in one pass over the batch, then one COPY of the leaf
    rows and one of the stored nodes. Takes the LogState row lock: call it last in the ingest transaction."""
    if not accepted:
        return
    hashes = bytes(log_batch.leaf_hashes)
    state = log_state(lock=True)
    start = state.size
    new_leaves = [hashes[32 * record.position : 32 * record.position + 32] for record in accepted]
    frontier, nodes = append_leaves(
        start, _split(bytes(state.frontier)), new_leaves, keep=lambda level: level % STRATUM == 0
    )
    agent_id, batch_id = log_batch.agent_id, log_batch.pk
    _copy(
        LogLeaf._meta.db_table,
        _LEAF_COLUMNS,
        [
            (
                start + i,
                leaf,
                record.record_id,
                record.tenant,
                record.contract,
                agent_id,
                record.seq,
                record.start_ns,
                batch_id,
                record.position,
            )
            for i, (leaf, record) in enumerate(zip(new_leaves, accepted, strict=True))
        ],
    )
    _copy(LogNode._meta.db_table, ("level", "index", "hash"), nodes)
    state.size = start + len(accepted)
    state.frontier = b"".join(frontier)
    state.save(update_fields=["size", "frontier"])


_LEAF_COLUMNS = (
    "index",
    "leaf_hash",
    "record_id",
    "tenant",
    "contract",
    "agent_id",
    "seq",
    "start_ns",
    "batch_id",
    "position",
)


def _copy(table: str, columns: tuple[str, ...], rows: Sequence[tuple[Any, ...]]) -> None:
    """COPY rows in (bulk_create spends ~100 µs per row building SQL; COPY a few). A refused row raises
    Django's database errors (IntegrityError for a record id or seq logged already)."""
    if not rows:
        return
    with (
        connection.cursor() as cursor,
        connection.wrap_database_errors,
        cursor.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy,
    ):
        write = copy.write_row
        for row in rows:
            write(row)


def publish_checkpoint(reason: str, invoice_id: int | None = None) -> Checkpoint:
    """Sign the current tree head, after proving it extends the last checkpoint (else refuse)."""
    with transaction.atomic():
        state = log_state(lock=True)  # no append can slip between reading the head and signing it
        size, root = state.size, fold(_split(bytes(state.frontier)))
        last = Checkpoint.objects.order_by("-size", "-id").first()
        if last is not None:
            check_extends(last, size, root)
        body = CheckpointBody(origin=settings.LEDGER_ORIGIN, size=size, root_hash=root)
        note = sign_checkpoint(body, private_key_from_seed(settings.PLATFORM_SIGNING_KEY))
        return Checkpoint.objects.create(
            size=size, root_hash=root, note=note, reason=reason, invoice_id=invoice_id
        )


def check_extends(last: Checkpoint, size: int, root: bytes) -> None:
    """Raise CheckpointRefused unless the stored log proves (size, root) consistent with ``last``."""
    try:
        tree = StoredTree(size)
        proof = consistency_path(last.size, size, tree.subtree) if last.size <= size else []
        verify_consistency(last.size, size, bytes(last.root_hash), root, proof)
        if last.size and tree.subtree(0, last.size) != bytes(last.root_hash):
            raise ProofError("the stored leaves no longer hash to the last checkpoint's root")
    except (ProofError, LookupError) as error:
        raise CheckpointRefused(
            f"tree of size {size} (root {base64.b64encode(root).decode()}) is not consistent with "
            f"checkpoint {last.size}: {error}"
        ) from None


def record_gap_events(agent: Agent, gaps: Iterable[tuple[int, int, datetime]]) -> None:
    """One ``ledger.sequence_gap`` event per newly detected gap ``(first missing seq, last missing seq,
    detected at)``, published as a platform-wide webhook."""
    events = LedgerEvent.objects.bulk_create(
        LedgerEvent(
            kind=LedgerEvent.Kind.SEQUENCE_GAP,
            agent=agent,
            payload={
                "agent_id": agent.agent_id,
                "first_missing": first,
                "last_missing": last,
                "missing": last - first + 1,
                "detected_at": detected_at.isoformat(),
            },
        )
        for first, last, detected_at in gaps
    )
    for event in events:
        publish_event(event.kind, None, event.payload, f"{event.kind}:{event.pk}")
