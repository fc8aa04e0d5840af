"""Ingest of signed record batches: verify, validate, deduplicate, store once, answer the same on replay.

Retry semantics: a batch is identified by the digest of its signed header. The first answer is stored
with the batch, under a per-agent row lock, so a replayed batch (also several at once) gets exactly
that answer back and stores nothing. Sequence numbers already stored for the agent are duplicates.
A failure before commit stores nothing in PostgreSQL; the ClickHouse insert carries a deduplication
token derived from the batch, so the retry after such a failure does not store the records twice.
Accepted records are appended to the verifiable log (ledger.services.append_batch) in the same
transaction, after the answer is saved: exactly once, in ingest order.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from clickhouse_connect.driver.exceptions import ClickHouseError
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.models import Agent
from agents.selectors import agent_scope, key_with_agent
from clickhouse_store import query
from contracts.models import Contract
from ledger.services import AcceptedRecord, append_batch, record_gap_events
from treemeter_records import (
    BatchError,
    ParsedBatch,
    check_batch_signature,
    check_merkle_root,
    parse_batch,
    validate_batch_records,
)
from usage.cache import bump_data_versions

from . import sequences
from .models import IngestBatch, RejectedRecord, SequenceGap, SequenceRange

RECORDS_TABLE = "usage_records"


class IngestRefused(Exception):
    """The whole batch is refused; nothing is stored."""

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}


@dataclass(frozen=True)
class IngestAnswer:
    status: int
    body: dict[str, Any]


@dataclass
class _Sorted:
    accepted: list[tuple[int, bytes]] = field(default_factory=list)  # (seq, line)
    logged: list[AcceptedRecord] = field(default_factory=list)  # parallel to accepted
    line_seqs: list[int] = field(default_factory=list)  # the readable seqs of all lines, in order
    duplicate: int = 0
    rejections: list[dict[str, Any]] = field(default_factory=list)


def ingest_batch(body: bytes, *, now: datetime | None = None) -> IngestAnswer:
    if len(body) > settings.INGEST_MAX_BATCH_BYTES:
        raise IngestRefused(
            413, "batch_too_large", f"A batch may hold at most {settings.INGEST_MAX_BATCH_BYTES} bytes."
        )
    try:
        batch = parse_batch(body, max_records=settings.INGEST_MAX_BATCH_RECORDS)
    except BatchError as error:
        raise IngestRefused(error.http_status, error.code, error.message) from None
    header = batch.header
    key = key_with_agent(header["key_id"])
    if key is None or key.agent.agent_id != header["agent_id"]:
        raise IngestRefused(401, "unknown_agent", "No registered agent holds this key id.")
    if key.revoked_at is not None:
        raise IngestRefused(
            403, "key_revoked", f"Key {key.key_id} was revoked at {key.revoked_at.isoformat()}."
        )
    if not key.agent.active:
        raise IngestRefused(403, "agent_disabled", f"Agent {key.agent.agent_id} is disabled.")
    try:
        check_batch_signature(batch, base64.b64decode(key.public_key))
        leaves = check_merkle_root(batch)
    except BatchError as error:
        raise IngestRefused(error.http_status, error.code, error.message) from None

    now = now or timezone.now()
    with transaction.atomic():
        agent = Agent.objects.select_for_update().get(pk=key.agent_id)
        previous = IngestBatch.objects.filter(agent=agent, header_digest=batch.header_digest).first()
        if previous is not None:
            return IngestAnswer(previous.status_code, previous.response)
        ranges = list(SequenceRange.objects.filter(agent=agent).values_list("first_seq", "last_seq"))
        try:
            result = _sort_records(agent, batch, ranges, now)
        except BatchError as error:
            raise IngestRefused(error.http_status, error.code, error.message) from None
        if result.accepted:
            try:
                _store(agent.agent_id, batch.header_digest, result.accepted)
            except ClickHouseError as error:  # nothing is committed: the agent retries the same batch
                raise IngestRefused(503, "storage_unavailable", f"Usage store unavailable: {error}") from None
            bump_data_versions({entry.tenant for entry in result.logged})
            _advance_ranges(agent, ranges, [seq for seq, _ in result.accepted])
        answer = _answer(batch.header_digest, header, result)
        saved = IngestBatch.objects.create(
            agent=agent,
            header_digest=batch.header_digest,
            key_id=key.key_id,
            first_seq=header["first_seq"],
            last_seq=header["last_seq"],
            record_count=header["count"],
            merkle_root=header["merkle_root"],
            accepted=len(result.accepted),
            duplicate=result.duplicate,
            rejected=len(result.rejections),
            status_code=answer.status,
            response=answer.body,
        )
        RejectedRecord.objects.bulk_create(
            RejectedRecord(batch=saved, agent=agent, **rejection) for rejection in result.rejections
        )
        append_batch(
            saved, body, batch.header_bytes, batch.signature, leaves, result.line_seqs, result.logged
        )
    return answer


def _sort_records(agent: Agent, batch: ParsedBatch, ranges: list[sequences.Range], now: datetime) -> _Sorted:
    """Decide for each record: accepted, duplicate, or rejected with a reason code."""
    checked = validate_batch_records(
        batch,
        now_ns=int(now.timestamp() * 1_000_000_000),
        max_future_ns=settings.INGEST_MAX_FUTURE_SKEW_SECONDS * 1_000_000_000,
    )
    result = _Sorted()
    result.line_seqs = sorted(
        [seq for seq, _ in checked.valid] + [p["seq"] for p in checked.problems if p["seq"] is not None]
    )
    for problem in checked.problems:
        result.rejections.append(
            _rejection(
                problem["seq"],
                problem["record_id"] or "",
                problem["code"],
                problem["field"],
                problem["message"],
            )
        )
    scope = agent_scope(agent.pk)
    candidates: list[tuple[int, str, bytes, AcceptedRecord]] = []  # (seq, record_id, line, log entry)
    contract_codes = {record["contract"] for _, record in checked.valid}
    contracts = {
        code: (tenant, package)
        for code, tenant, package in Contract.objects.filter(code__in=contract_codes).values_list(
            "code", "tenant__code", "package__code"
        )
    }
    seen_ids: set[str] = set()
    for (seq, record), index in zip(checked.valid, checked.valid_index, strict=True):
        record_id = record["record_id"]
        refusal = _policy_problem(record, contracts, scope.allows, seen_ids)
        if refusal:
            result.rejections.append(_rejection(seq, record_id, *refusal))
            continue
        seen_ids.add(record_id)
        entry = AcceptedRecord(
            index, seq, record_id, record["tenant"], record["contract"], record["start_ns"]
        )
        candidates.append((seq, record_id, batch.lines[index], entry))

    already = sequences.covered(ranges, [seq for seq, _, _, _ in candidates])
    stored_ids = _stored_record_ids(agent.agent_id, sorted(already)) if already else {}
    for seq, record_id, line, entry in candidates:
        if seq not in already:
            result.accepted.append((seq, line))
            result.logged.append(entry)
        elif stored_ids.get(seq) == record_id:
            result.duplicate += 1
        else:
            result.rejections.append(
                _rejection(
                    seq,
                    record_id,
                    "seq_conflict",
                    "seq",
                    f"seq {seq} is already stored with another record id.",
                )
            )
    return result


def _policy_problem(
    record: dict[str, Any],
    contracts: dict[str, tuple[str, str]],
    allows: Callable[[str, str], bool],
    seen_ids: set[str],
) -> tuple[str, str, str] | None:
    tenant, contract = record["tenant"], record["contract"]
    if contract not in contracts or contracts[contract][0] != tenant:
        return ("unknown_contract", "contract", f"Tenant {tenant} has no contract {contract}.")
    if contracts[contract][1] != record["package"]:
        return ("package_mismatch", "package", f"Contract {contract} is not for package {record['package']}.")
    if not allows(tenant, contract):
        return ("not_bound", "tenant", f"This agent is not bound to tenant {tenant} / contract {contract}.")
    if record["record_id"] in seen_ids:
        return ("duplicate_record_id", "record_id", "The record id appears twice in this batch.")
    return None


def _rejection(seq: int | None, record_id: str, code: str, field_name: str, message: str) -> dict[str, Any]:
    return {"seq": seq, "record_id": record_id, "code": code, "field": field_name or "", "message": message}


def _stored_record_ids(agent_id: str, seqs: list[int]) -> dict[int, str]:
    rows = query.select(
        f"SELECT seq, toString(record_id) FROM {RECORDS_TABLE} "  # noqa: S608 - constant table name
        "WHERE agent_id = {agent:String} AND seq IN {seqs:Array(UInt64)}",
        {"agent": agent_id, "seqs": seqs},
    )
    return {int(seq): record_id for seq, record_id in rows}


def _store(agent_id: str, header_digest: str, accepted: list[tuple[int, bytes]]) -> None:
    """One insert per batch; the engine parses the canonical JSON lines itself."""
    token = hashlib.sha256(
        f"{agent_id}:{header_digest}:".encode() + b",".join(str(seq).encode() for seq, _ in accepted)
    ).hexdigest()
    query.insert_json_lines(RECORDS_TABLE, b"\n".join(line for _, line in accepted), dedup_token=token)


def _advance_ranges(agent: Agent, before: list[sequences.Range], stored: list[int]) -> None:
    after = sequences.merge([*before, *sequences.runs(stored)])
    SequenceRange.objects.filter(agent=agent).delete()
    SequenceRange.objects.bulk_create(SequenceRange(agent=agent, first_seq=a, last_seq=b) for a, b in after)
    missing = set(sequences.holes(after))
    open_gaps = {
        (g.first_missing, g.last_missing): g for g in SequenceGap.objects.filter(agent=agent, closed_at=None)
    }
    closed = [gap.pk for span, gap in open_gaps.items() if span not in missing]
    SequenceGap.objects.filter(pk__in=closed).update(closed_at=timezone.now())
    opened = SequenceGap.objects.bulk_create(
        SequenceGap(agent=agent, first_missing=a, last_missing=b) for a, b in sorted(missing - set(open_gaps))
    )
    record_gap_events(agent, opened)


def _answer(header_digest: str, header: dict[str, Any], result: _Sorted) -> IngestAnswer:
    body: dict[str, Any] = {
        "batch": header_digest,
        "agent_id": header["agent_id"],
        "first_seq": header["first_seq"],
        "last_seq": header["last_seq"],
        "accepted": len(result.accepted),
        "duplicate": result.duplicate,
        "rejected": len(result.rejections),
        "rejections": result.rejections,
    }
    if result.rejections and not result.accepted and not result.duplicate:
        body = {"code": "all_records_rejected", "message": "Every record in the batch was rejected.", **body}
        return IngestAnswer(422, body)
    return IngestAnswer(200, body)
