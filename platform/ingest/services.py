"""Ingest of signed record batches: verify, validate, deduplicate, log, then store once.

PostgreSQL decides, ClickHouse follows. One transaction per batch locks the agent, sorts the records
(accepted, duplicate, rejected), keeps the signed batch in the log (`ledger.LogBatch`, which the answer
references), saves the answer, the rejections, the sequence ranges and the log's leaves, and writes
the accepted lines to the outbox (`PendingInsert`). Only after that commit are the lines inserted
into ClickHouse (`store_pending`), so the invariant of docs/ledger.md holds by design: every stored
record is a leaf and every leaf a stored record, once each. A failure before the commit stores nothing
anywhere; a failure after it leaves the outbox row, which the next `store_pending` (right after the
next batch, the beat task `ingest.store_pending`, and every reader that bills or proves: invoices,
SLA reports, exports, the store audit) inserts with the same deduplication token.

Retry semantics: a batch is identified by the digest of its signed header. Its first answer is stored
with it, under the per-agent row lock, so a replayed batch (also several at once) gets exactly that
answer back and stores nothing. A seq already logged for the agent is a duplicate (same record id) or
a `seq_conflict`; a record id already logged under another agent or seq is `record_id_reused`.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone
from psycopg.types.json import Jsonb

from agents.models import Agent, AgentKey
from agents.selectors import agent_scope, key_with_agent
from contracts.models import Contract, ContractPackage
from ledger.models import LogLeaf
from ledger.services import AcceptedRecord, append_batch, keep_signed_batch, record_gap_events
from treemeter_records import (
    BatchError,
    ParsedBatch,
    WireRecord,
    check_batch_signature,
    check_merkle_root,
    parse_batch,
    read_batch_records,
)
from treemeter_records.timeutil import unix_nanos

from . import rejections, sequences
from .models import IngestBatch, PendingInsert, RejectedRecord, SequenceGap, SequenceRange
from .outbox import Committed, StoreUnavailable, store_pending
from .rejections import rejection
from .routing import RoutedRecords

_DAY_NS = 86_400 * 10**9

logger = logging.getLogger(__name__)


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
    replayed: bool = False  # the stored first answer of a batch received before


@dataclass(frozen=True)
class _ContractTerms:
    tenant: str
    packages: frozenset[str]  # its own and the further ones it holds (contracts.ContractPackage)
    horizon_days: int
    sandbox: bool  # a customer sandbox's: its records are stored apart


@dataclass
class _Sorted:
    accepted: list[tuple[int, bytes]] = field(default_factory=list)  # (seq, line)
    sandbox: set[int] = field(default_factory=set)  # the accepted seqs of sandbox contracts' records
    logged: list[AcceptedRecord] = field(default_factory=list)  # parallel to accepted
    line_seqs: list[int] = field(default_factory=list)  # the readable seqs of all lines, in order
    duplicate: int = 0
    rejections: list[dict[str, Any]] = field(default_factory=list)


def ingest_batch(body: bytes, *, now: datetime | None = None) -> IngestAnswer:
    """Take one signed batch; answer as docs/record-format.md says. Call it outside any transaction.

    A database failure answers 503 `storage_unavailable` with nothing committed: the agent retries.
    """
    now = now or timezone.now()
    try:
        batch, key, leaves = _verified(body)
        try:
            answer, pending = _commit(key, batch, body, leaves, now, look_up_ids=False)
        except IntegrityError:
            # A record id logged already (by an earlier batch, or a concurrent one of another agent: the
            # unique leaf index waited for its commit). Sorting again with the look-up finds it and
            # rejects it as `record_id_reused`; the common case never pays for that look-up.
            answer, pending = _commit(key, batch, body, leaves, now, look_up_ids=True)
    except DatabaseError as error:
        logger.warning("ingest transaction failed: %s", error)
        raise IngestRefused(
            503, "storage_unavailable", "The platform's database is unavailable; retry the batch."
        ) from None
    if pending is not None:
        try:
            store_pending([pending])
        except StoreUnavailable as error:  # committed: the outbox keeps it for the next store_pending
            logger.warning("batch %s stays in the outbox: %s", batch.header_digest, error)
    return answer


def _verified(body: bytes) -> tuple[ParsedBatch, AgentKey, list[bytes]]:
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
    return batch, key, leaves


def _commit(
    key: AgentKey, batch: ParsedBatch, body: bytes, leaves: list[bytes], now: datetime, *, look_up_ids: bool
) -> tuple[IngestAnswer, Committed | None]:
    """The PostgreSQL side of one batch, in one durable transaction; returns the answer and the id of
    the outbox row to store (None when nothing was accepted or the batch is a replay)."""
    header = batch.header
    with transaction.atomic(durable=True):
        agent = Agent.objects.select_for_update().get(pk=key.agent_id)
        previous = IngestBatch.objects.filter(agent=agent, header_digest=batch.header_digest).first()
        if previous is not None:
            return IngestAnswer(previous.status_code, previous.response, replayed=True), None
        ranges = list(SequenceRange.objects.filter(agent=agent).values_list("first_seq", "last_seq"))
        try:
            result = _sort_records(agent, key, batch, ranges, now, look_up_ids)
        except BatchError as error:
            raise IngestRefused(error.http_status, error.code, error.message) from None
        answer = _answer(batch.header_digest, header, result)
        log_batch = keep_signed_batch(
            agent.pk,
            body,
            batch.header_bytes,
            batch.signature,
            leaves,
            header["first_seq"],
            header["last_seq"],
            result.line_seqs,
        )
        saved = IngestBatch.objects.create(
            agent=agent,
            log_batch=log_batch,
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
            RejectedRecord(batch=saved, agent=agent, **rejected) for rejected in result.rejections
        )
        if not result.accepted:
            return answer, None
        _advance_ranges(agent, ranges, [seq for seq, _ in result.accepted])
        lines, sandbox_lines = _split_sandbox(result)
        token = _dedup_token(agent.agent_id, batch.header_digest, result.accepted)
        tenants = sorted({entry.tenant for entry in result.logged})
        pending = _insert_pending(saved.pk, token, lines, sandbox_lines, tenants)
        # Takes the log's row lock, the one lock every batch of every agent shares: last, so it is held
        # only for the append and the commit.
        append_batch(log_batch, result.logged)
    return answer, Committed(pending, lines, token, tenants, sandbox_lines)


def _split_sandbox(result: _Sorted) -> tuple[bytes, bytes]:
    """The accepted lines for usage_records and those of sandbox contracts, for sandbox_records."""
    if not result.sandbox:
        return b"\n".join(line for _, line in result.accepted), b""
    return (
        b"\n".join(line for seq, line in result.accepted if seq not in result.sandbox),
        b"\n".join(line for seq, line in result.accepted if seq in result.sandbox),
    )


def _insert_pending(batch_id: int, token: str, lines: bytes, sandbox_lines: bytes, tenants: list[str]) -> int:
    """The outbox row, its lines sent as one binary parameter: Django's client-side binding would spell a
    10k-record batch's 14 MB as a 28 MB hex literal for PostgreSQL to parse (~30 µs a record)."""
    table = PendingInsert._meta.db_table
    sql = f"INSERT INTO {table} (batch_id, dedup_token, lines, sandbox_lines, tenants, created_at) VALUES (%s, %s, %b, %b, %s, %s) RETURNING id"  # noqa: S608, E501 - the model's own table
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, (batch_id, token, lines, sandbox_lines, Jsonb(tenants), timezone.now()))
        row = cursor.fetchone()
    assert row is not None
    return int(row[0])


def _dedup_token(agent_id: str, header_digest: str, accepted: list[tuple[int, bytes]]) -> str:
    return hashlib.sha256(
        f"{agent_id}:{header_digest}:".encode() + b",".join(str(seq).encode() for seq, _ in accepted)
    ).hexdigest()


def _sort_records(
    agent: Agent,
    batch_key: AgentKey,
    batch: ParsedBatch,
    ranges: list[sequences.Range],
    now: datetime,
    look_up_ids: bool,
) -> _Sorted:
    """Decide for each record: accepted, duplicate, or rejected with a reason code. Without
    `look_up_ids`, record ids logged already are left to the log's unique index to refuse."""
    checked = read_batch_records(batch)
    result = _Sorted()
    result.line_seqs = sorted(
        [seq for seq, _ in checked.valid] + [p["seq"] for p in checked.problems if p["seq"] is not None]
    )
    for problem in checked.problems:
        result.rejections.append(
            rejection(
                problem["seq"], problem["record_id"], problem["code"], problem["field"], problem["message"]
            )
        )
    scope = agent_scope(agent.pk)
    routed = RoutedRecords(batch_key)
    contracts = _contract_terms({record.contract for _, record in checked.valid})
    now_ns = unix_nanos(now)
    skew_s = settings.INGEST_MAX_FUTURE_SKEW_SECONDS  # read once: a setting costs µs per read
    candidates: list[tuple[int, str, bytes, AcceptedRecord]] = []  # (seq, record_id, line, log entry)
    seen_ids: set[str] = set()
    for (seq, record), index in zip(checked.valid, checked.valid_index, strict=True):
        record_id = record.record_id
        refusal = _policy_problem(record, contracts, scope.allows, seen_ids, now_ns, skew_s)
        refusal = refusal or routed.problem(record, batch.lines[index])
        if refusal:
            result.rejections.append(rejection(seq, record_id, *refusal))
            continue
        seen_ids.add(record_id)
        entry = AcceptedRecord(index, seq, record_id, record.tenant, record.contract, record.start_ns)
        candidates.append((seq, record_id, batch.lines[index], entry))

    already = sequences.covered(ranges, [seq for seq, _, _, _ in candidates])
    by_seq, by_id = _logged(agent, sorted(already), list(seen_ids) if look_up_ids else [])
    for seq, record_id, line, entry in candidates:
        if seq in already:
            if by_seq.get(seq) == record_id:
                result.duplicate += 1
            else:
                message = f"seq {seq} is already stored with another record id."
                result.rejections.append(rejection(seq, record_id, rejections.SEQ_CONFLICT, "seq", message))
        elif record_id in by_id:
            message = f"record id {record_id} is already stored under {by_id[record_id]}."
            result.rejections.append(
                rejection(seq, record_id, rejections.RECORD_ID_REUSED, "record_id", message)
            )
        else:
            result.accepted.append((seq, line))
            result.logged.append(entry)
            if contracts[entry.contract].sandbox:
                result.sandbox.add(seq)
    return result


def _logged(agent: Agent, seqs: list[int], record_ids: list[str]) -> tuple[dict[int, str], dict[str, str]]:
    """The log's record ids of this agent's `seqs`, and where each of `record_ids` is logged already
    ("agent <id> seq <n>"): the log holds every stored record, committed, so no ClickHouse read is needed."""
    by_seq = {
        seq: str(record_id)
        for seq, record_id in LogLeaf.objects.filter(agent=agent, seq__in=seqs).values_list(
            "seq", "record_id"
        )
    }
    by_id = {
        str(record_id): f"agent {agent_id} seq {seq}"
        for record_id, agent_id, seq in LogLeaf.objects.filter(record_id__in=record_ids).values_list(
            "record_id", "agent__agent_id", "seq"
        )
    }
    return by_seq, by_id


_CONTRACT_COLUMNS = (
    "code",
    "tenant__code",
    "package__code",
    "late_usage_policy",
    "late_usage_days",
    "sandbox",
)


def _contract_terms(codes: set[str]) -> dict[str, _ContractTerms]:
    """Per contract code: its tenant, the packages it holds, and how many days back its records are
    accepted: the platform's INGEST_MAX_PAST_DAYS, or the contract's late-usage horizon (`late_usage_days`
    under `ignore_after`) when that is longer, so late records its policy reports are never refused."""
    default_days = settings.INGEST_MAX_PAST_DAYS
    further: dict[str, set[str]] = {}
    for code, package in ContractPackage.objects.filter(contract__code__in=codes).values_list(
        "contract__code", "package__code"
    ):
        further.setdefault(code, set()).add(package)
    return {
        code: _ContractTerms(
            tenant,
            frozenset({package, *further.get(code, ())}),
            max(default_days, late_days) if policy == Contract.LateUsage.IGNORE_AFTER else default_days,
            sandbox,
        )
        for code, tenant, package, policy, late_days, sandbox in Contract.objects.filter(
            code__in=codes
        ).values_list(*_CONTRACT_COLUMNS)
    }


def _policy_problem(
    record: WireRecord,
    contracts: dict[str, _ContractTerms],
    allows: Callable[[str, str], bool],
    seen_ids: set[str],
    now_ns: int,
    skew_s: int,
) -> tuple[str, str, str] | None:
    tenant, contract = record.tenant, record.contract
    terms = contracts.get(contract)
    if terms is None or terms.tenant != tenant:
        return (rejections.UNKNOWN_CONTRACT, "contract", f"Tenant {tenant} has no contract {contract}.")
    if record.package not in terms.packages:
        return (
            rejections.PACKAGE_MISMATCH,
            "package",
            f"Contract {contract} holds no package {record.package}.",
        )
    if not allows(tenant, contract):
        return (
            rejections.NOT_BOUND,
            "tenant",
            f"This agent is not bound to tenant {tenant} / contract {contract}.",
        )
    if record.record_id in seen_ids:
        return (rejections.DUPLICATE_RECORD_ID, "record_id", "The record id appears twice in this batch.")
    return _outside_window(record, terms.horizon_days, now_ns, skew_s)


def _outside_window(
    record: WireRecord, horizon_days: int, now_ns: int, skew_s: int
) -> tuple[str, str, str] | None:
    """Records must start within the contract's horizon and end by now + the allowed skew, both on the
    platform's clock (the agent's times corrected by its measured drift); docs/record-format.md says why."""
    drift_ns = record.clock_drift_us * 1000
    earliest = now_ns - horizon_days * _DAY_NS
    latest = now_ns + skew_s * 10**9
    if record.start_ns + drift_ns < earliest:
        message = f"start_ns is more than {horizon_days} days before the platform's clock."
        return (rejections.TIMESTAMP_OUT_OF_WINDOW, "start_ns", message)
    for name, value in (("start_ns", record.start_ns), ("end_ns", record.end_ns)):
        if value + drift_ns > latest:
            message = f"{name} is more than {skew_s} s after the platform's clock."
            return (rejections.TIMESTAMP_OUT_OF_WINDOW, name, message)
    return None


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
    record_gap_events(agent, [(g.first_missing, g.last_missing, g.detected_at) for g in opened])


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
        body = {
            "code": "all_records_rejected",
            "message": "Every record in the batch was rejected.",
            "details": {"rejected": len(result.rejections)},
            **body,
        }
        return IngestAnswer(422, body)
    return IngestAnswer(200, body)
