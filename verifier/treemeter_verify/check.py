"""verify_export: every check of an invoice export, each with a verdict."""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import multiprocessing
import zlib
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from hashlib import sha256
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from . import rating
from .canonical import canonical_bytes
from .catalogue import DayTokens, add_record, catalogue_problems
from .commercial import commercial_problems
from .credits import (
    Finding,
    outcome_findings,
    outcome_record_ids,
    prepaid_credit_finding,
    service_credit_findings,
)
from .keys import PinnedKeys
from .late import late_usage_findings
from .merkle import ProofError, root_from_multi_inclusion, root_of_leaves, verify_consistency
from .metrics import billable_records, metric_verdicts
from .note import Checkpoint, NoteError, open_checkpoint
from .rating import segment_amounts
from .records import fields_of, load_record, match_record, record_fields, usage_of_columns
from .routed import is_routed, routing_problem, superseded_ids
from .taxes import totals_problems

FORMAT = "treemeter-invoice-export/1"
BATCH_DOMAIN = b"treemeter-batch-v1\n"
EXAMPLES = 5  # failing items named per check


class ExportError(ValueError):
    """The export cannot be read at all."""


@dataclass(frozen=True)
class Verdict:
    check: str
    ok: bool
    detail: str
    skipped: bool = False


@dataclass
class Report:
    verdicts: list[Verdict] = field(default_factory=list)
    records: int = 0

    @property
    def ok(self) -> bool:
        return bool(self.verdicts) and all(v.ok for v in self.verdicts)

    def skip(self, check: str, detail: str) -> None:
        """A check this verifier does not make (e.g. a charge model it does not re-rate): not a failure."""
        self.verdicts.append(Verdict(check, True, detail, skipped=True))

    def add(self, check: str, problems: Sequence[str], good: str) -> None:
        if problems:
            more = f" (+{len(problems) - EXAMPLES} more)" if len(problems) > EXAMPLES else ""
            self.verdicts.append(Verdict(check, False, "; ".join(problems[:EXAMPLES]) + more))
        else:
            self.verdicts.append(Verdict(check, True, good))


@dataclass
class _Batch:
    agent_id: str
    first_seq: int
    last_seq: int
    count: int
    leaves: list[bytes]
    seqs: list[int] | None
    valid: bool


GZIP_MAGIC = b"\x1f\x8b"


def read_export(body: bytes) -> tuple[dict[str, Any], list[bytes]]:
    """Split an export body into its manifest and record lines; a gzip-compressed export (`compress=gzip`)
    is decompressed in memory first."""
    if body[:2] == GZIP_MAGIC:
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as error:
            raise ExportError(f"the compressed export cannot be read: {error}") from None
    lines = body.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        raise ExportError("the export is empty")
    try:
        manifest = json.loads(lines[0])
    except ValueError as error:
        raise ExportError(f"the manifest line is not JSON: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ExportError(f"not a {FORMAT} export")
    return manifest, lines[1:]


def verify_export(
    manifest: dict[str, Any], lines: list[bytes], keys: PinnedKeys, previous: str | None = None, jobs: int = 1
) -> Report:
    """Every check; ``jobs`` > 1 scans the records in that many forked processes (Linux)."""
    report = Report(records=len(lines))
    try:
        _verify(manifest, lines, keys, previous, report, jobs)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as error:
        raise ExportError(f"the export is malformed: {error!r}") from None
    return report


def _verify(
    manifest: dict[str, Any],
    lines: list[bytes],
    keys: PinnedKeys,
    previous: str | None,
    report: Report,
    jobs: int,
) -> None:
    invoice = manifest["invoice"]
    checkpoint = _check_checkpoint(manifest, keys, report)
    if previous is not None:
        _check_consistency(manifest, checkpoint, previous, keys, report)
    batches = _check_batches(manifest["batches"], keys, report)
    scope = _Scope(lines, batches, invoice, keys.agents)
    scans = _scan_all(scope, _runs(manifest["runs"], len(lines)), jobs)
    unsigned = [p for scan in scans for p in scan.unsigned]
    unlogged = [p for scan in scans for p in scan.unlogged]
    foreign = [p for scan in scans for p in scan.foreign]
    record_ids = [r for scan in scans for r in scan.record_ids]
    if len(set(record_ids)) != len(record_ids):
        foreign.append("a record id appears more than once")
    usage = [sum(column) for column in zip(*(scan.usage for scan in scans), strict=True)]
    superseded, unbilled = _superseded(scans, lines)
    usage = [total - left_out for total, left_out in zip(usage, unbilled, strict=True)]
    included = [
        (index, scan.leaves[32 * k : 32 * k + 32]) for scan in scans for k, index in enumerate(scan.indices)
    ]
    report.add("batch signatures", unsigned, f"{len(lines)} records in {len(batches)} agent-signed batches")
    report.add("records belong to the invoice", foreign, f"{len(lines)} records of {invoice['contract']}")
    misrouted = [p for scan in scans for p in scan.misrouted]
    _check_routing(sum(scan.routed for scan in scans), misrouted, report)
    _check_superseded(superseded, report)
    _check_inclusion(included, checkpoint, manifest, unlogged, report)
    _check_completeness(batches, manifest.get("reported_gaps", {}), report)
    _check_lines(invoice, manifest["prices"], usage, len(lines), report)
    retried = _superseded_ids(invoice, scans)
    # Read again, once, only for an invoice whose lines need the records one by one.
    billable = _billable(invoice, lines, retried) if _rates_records(invoice) else []
    _check_metrics(invoice, manifest["prices"], billable, report)
    _check_catalogue(invoice, billable, report)
    _check_outcomes(invoice, manifest["prices"], scans, lines, retried, report)
    _check_service_credits(invoice, report)
    for finding in late_usage_findings(invoice, manifest.get("earlier_terms", {})):
        _add(report, finding)
    _check_commercial(invoice, report)
    _check_totals(invoice, report)
    _add(report, prepaid_credit_finding(invoice))


# A run of record lines: (first line, count, first log index, batch slot, first line in the batch);
# an unlogged run has None for the last three.
Run = tuple[int, int, int | None, int | None, int | None]


@dataclass
class _Scope:
    lines: list[bytes]
    batches: list[_Batch]
    invoice: dict[str, Any]
    agents: dict[str, bytes]  # pinned agent (and router) keys by key id


@dataclass
class _Scan:
    """What some runs of record lines yield: problems, ids, logged leaves, summed billable usage, how
    many records are routed (format v2), the (tenant, contract, record id) that their decisions
    supersede, and the lines that are not records (from the scan's first), which place the record ids
    on their lines."""

    unsigned: list[str] = field(default_factory=list)
    unlogged: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    record_ids: list[bytes] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)
    leaves: bytes = b""
    usage: list[int] = field(default_factory=lambda: [0] * len(rating.DIMENSIONS))
    routed: int = 0
    misrouted: list[str] = field(default_factory=list)
    supersedes: list[tuple[bytes, bytes, bytes]] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)


# What forked scanners read (inherited, never pickled): per share its joined lines and runs.
_SHARES: list[tuple[bytes, list[Run], _Scope]] = []
LINES_PER_JOB = 50_000  # fewer lines than this per process: forking costs more than it saves


def _runs(runs: list[list[Any]], lines: int) -> list[Run]:
    """The manifest's runs [count, first index, slot, first line], checked and placed on the record lines."""
    out: list[Run] = []
    offset = 0
    for count, first, slot, position in runs:
        if not isinstance(count, int) or count < 1:
            raise ExportError("a run must count at least one line")
        if first is None and slot is None and position is None:
            out.append((offset, count, None, None, None))
        elif all(isinstance(x, int) for x in (first, slot, position)):
            out.append((offset, count, first, slot, position))
        else:
            raise ExportError("a logged run needs a log index, a batch slot and a line")
        offset += count
    if offset != lines:
        raise ExportError(f"the runs cover {offset} lines, the export holds {lines}")
    return out


def _scan_all(scope: _Scope, runs: list[Run], jobs: int) -> list[_Scan]:
    """Scan the runs, in ``jobs`` forked processes when there are enough lines (about equal shares).

    Each process gets its share as one joined blob and splits it itself: touching the parent's line
    objects would copy their pages into every child (copy-on-write of reference counts)."""
    global _SHARES
    n = len(scope.lines)
    jobs = max(1, min(jobs, n // LINES_PER_JOB))
    if jobs == 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [_scan(scope, runs)]
    share, shares, current, size = -(-n // jobs), [], [], 0
    for run in runs:
        current.append(run)
        size += run[1]
        if size >= share:
            shares.append(current)
            current, size = [], 0
    if current:
        shares.append(current)
    _SHARES = [
        (b"\n".join(scope.lines[part[0][0] : part[-1][0] + part[-1][1]]), part, replace(scope, lines=[]))
        for part in shares
    ]
    try:
        with multiprocessing.get_context("fork").Pool(len(shares)) as pool:
            return pool.map(_scan_forked, range(len(shares)))
    finally:
        _SHARES = []


def _scan_forked(number: int) -> _Scan:
    blob, part, scope = _SHARES[number]
    base = part[0][0]
    return _scan(replace(scope, lines=blob.split(b"\n")), [(o - base, c, i, s, p) for o, c, i, s, p in part])


def _scan(scope: _Scope, runs: list[Run]) -> _Scan:
    """Every check on every line of the runs. A run whose lines are all canonical records of one valid
    batch is checked as a whole (C-level passes over its lines: one hash each, one regular-expression
    match each, set/min/max over the columns); any doubt sends it through the per-line loop, which
    names each failing record."""
    out = _Scan()
    leaves: list[bytes] = []
    matched: list[tuple[bytes, ...]] = []  # m.groups() of billable canonical records of checked lines
    parsed: list[tuple[int, ...]] = []  # billable usage of whole runs, and of records read by JSON
    invoice = scope.invoice
    tenant, contract = invoice["tenant"].encode(), invoice["contract"].encode()
    bounds = (tenant, contract, invoice["period_start_ns"], invoice["period_end_ns"])
    for run in runs:
        offset, count, first, slot, position = run
        lines = scope.lines[offset : offset + count]
        batch = scope.batches[slot] if slot is not None and 0 <= slot < len(scope.batches) else None
        whole = _scan_run(lines, first, position, batch, bounds) if first is not None and batch else None
        if whole is None or first is None:
            _scan_lines(lines, run, scope, bounds, out, leaves, matched, parsed)
            continue
        record_ids, run_leaves, usage = whole
        out.record_ids += record_ids
        out.indices += range(first, first + count)
        leaves.append(run_leaves)
        parsed.append(usage)
    out.leaves = b"".join(leaves)
    matched_usage = usage_of_columns(list(zip(*matched, strict=True)))
    out.usage = [sum(column) for column in zip(matched_usage, *parsed, strict=True)]
    return out


def _scan_run(
    lines: list[bytes], first: int | None, position: int | None, batch: _Batch, bounds: tuple[Any, ...]
) -> tuple[tuple[bytes, ...], bytes, tuple[int, ...]] | None:
    """A run's record ids, joined leaf hashes and billable usage when every line passes every check."""
    count = len(lines)
    if not batch.valid or position is None or not 0 <= position <= len(batch.leaves) - count:
        return None
    matches = [match_record(line) for line in lines]
    if None in matches:
        return None
    groups = [m.groups() for m in matches]  # type: ignore[union-attr]
    columns = list(zip(*groups, strict=True))
    agents, contracts, *_, record_ids, seqs, starts, statuses, tenants, _, _ = columns
    tenant, contract, start, end = bounds
    seq_ints, start_ints = list(map(int, seqs)), list(map(int, starts))
    hash_of = sha256
    run_leaves = b"".join([hash_of(b"\x00" + line).digest() for line in lines])
    if (
        set(agents) != {batch.agent_id.encode()}
        or set(tenants) != {tenant}
        or set(contracts) != {contract}
        or min(seq_ints) < batch.first_seq
        or max(seq_ints) > batch.last_seq
        or min(start_ints) < start
        or max(start_ints) >= end
        or run_leaves != b"".join(batch.leaves[position : position + count])
    ):
        return None
    billable = None if set(statuses) == {b"ok"} else [status == b"ok" for status in statuses]
    return record_ids, run_leaves, tuple(usage_of_columns(columns, billable))


def _scan_lines(
    lines: list[bytes],
    run: Run,
    scope: _Scope,
    bounds: tuple[Any, ...],
    out: _Scan,
    leaves: list[bytes],
    matched: list[tuple[bytes, ...]],
    parsed: list[tuple[int, ...]],
) -> None:
    """The per-line checks of one run, naming every record that fails one."""
    offset, _, first, slot, position = run
    tenant, contract, start, end = bounds
    batches = scope.batches
    batch = batches[slot] if slot is not None and 0 <= slot < len(batches) else None
    for k, line in enumerate(lines):
        leaf = sha256(b"\x00" + line).digest()
        m = match_record(line)
        if m is not None:
            groups = m.groups()
            agent_id, record_contract, *_, record_id, seq_text, start_text, status, record_tenant, _, _ = (
                groups
            )
            seq, start_ns = int(seq_text), int(start_text)
            if status == b"ok":
                matched.append(groups)
        else:
            record = load_record(line)
            fields = record_fields(record)
            if fields is None:
                out.foreign.append(f"line {offset + k + 1} is not a record")
                out.skipped.append(offset + k)
                continue
            record_id, agent_id, seq, record_tenant, record_contract, start_ns, status, usage = fields
            if status == b"ok":
                parsed.append(usage)
            if is_routed(record):
                _scan_routed(record, (record_tenant, record_contract, record_id), scope.agents, out)
        out.record_ids.append(record_id)
        line_in_batch = None if position is None else position + k
        if (
            batch is None
            or line_in_batch is None
            or not batch.valid
            or not 0 <= line_in_batch < len(batch.leaves)
            or batch.leaves[line_in_batch] != leaf
            or agent_id != batch.agent_id.encode()
            or not batch.first_seq <= seq <= batch.last_seq
        ):
            out.unsigned.append(f"{record_id.decode()} is not covered by a valid agent batch signature")
        if first is None:
            out.unlogged.append(f"{record_id.decode()} is not in the log")
        else:
            out.indices.append(first + k)
            leaves.append(leaf)
        if record_tenant != tenant or record_contract != contract or not start <= start_ns < end:
            out.foreign.append(f"{record_id.decode()} does not belong to this invoice")


def _scan_routed(
    record: dict[str, Any], owner: tuple[bytes, bytes, bytes], agents: dict[str, bytes], out: _Scan
) -> None:
    """The routing check of one routed record (tenant, contract, record id: ``owner``); only a decision
    that passes it supersedes records."""
    tenant, contract, record_id = owner
    out.routed += 1
    problem = routing_problem(record, agents)
    if problem is not None:
        out.misrouted.append(f"{record_id.decode()}: {problem}")
        return
    out.supersedes += [(tenant, contract, r.encode()) for r in superseded_ids(record)]


def _superseded(scans: list[_Scan], lines: list[bytes]) -> tuple[int, list[int]]:
    """How many records of the export a retry of their tenant and contract superseded, and the usage of
    those the scans counted as billable (status ok), which is not billed. Without any supersedes claim
    (the common case) no line is read again."""
    named = {claim for scan in scans for claim in scan.supersedes}
    unbilled = [0] * len(rating.DIMENSIONS)
    count = 0
    for line in _lines_of(scans, lines, {record_id for _, _, record_id in named}):
        fields = fields_of(line)
        if fields is None:
            continue
        record_id, _, _, tenant, contract, _, status, usage = fields
        if (tenant, contract, record_id) in named:
            count += 1
            if status == b"ok":
                unbilled = [total + part for total, part in zip(unbilled, usage, strict=True)]
    return count, unbilled


def _lines_of(scans: list[_Scan], lines: list[bytes], record_ids: set[bytes]) -> Iterator[bytes]:
    """The lines of the records with these ids. Scans cover consecutive lines, in order; within one, the
    i-th record id is on the i-th line that is not skipped."""
    if not record_ids:
        return
    base = 0
    for scan in scans:
        for k, record_id in enumerate(scan.record_ids):
            if record_id in record_ids:
                yield lines[base + _line_of(k, scan.skipped)]
        base += len(scan.record_ids) + len(scan.skipped)


def _line_of(k: int, skipped: list[int]) -> int:
    """The line, from the scan's first, of its k-th record, given its lines that are not records."""
    for line in skipped:
        if line > k:
            break
        k += 1
    return k


def _check_superseded(superseded: int, report: Report) -> None:
    """Records a retry superseded (docs/record-format.md, ``supersedes``): in the export, never billed."""
    if not superseded:
        report.skip("superseded attempts", "no record superseded by a retry")
        return
    report.add("superseded attempts", [], f"{superseded} records superseded by retries, not billed")


def _check_routing(routed: int, problems: list[str], report: Report) -> None:
    """Routed (format v2) records: signed by their executor, decided by a pinned router, as decided."""
    if not routed:
        report.skip("routing decisions", "no routed (v2) records")
        return
    good = f"{routed} routed records signed by their executors and pinned routers, as decided"
    report.add("routing decisions", problems, good)


def _check_checkpoint(manifest: dict[str, Any], keys: PinnedKeys, report: Report) -> Checkpoint | None:
    try:
        checkpoint = open_checkpoint(manifest["checkpoint"], keys.platform)
    except NoteError as error:
        report.add("checkpoint signature", [str(error)], "")
        return None
    if checkpoint.size != manifest["bundle"]["tree_size"]:
        report.add("checkpoint signature", ["the proof bundle is for another tree size"], "")
        return None
    report.add("checkpoint signature", [], f"log {checkpoint.origin} at size {checkpoint.size}, signed")
    return checkpoint


def _check_consistency(
    manifest: dict[str, Any], checkpoint: Checkpoint | None, previous: str, keys: PinnedKeys, report: Report
) -> None:
    try:
        earlier = open_checkpoint(previous, keys.platform)
    except NoteError as error:
        report.add("consistency with saved checkpoint", [f"saved checkpoint: {error}"], "")
        return
    if checkpoint is None:
        report.add("consistency with saved checkpoint", ["no valid checkpoint to compare with"], "")
        return
    proofs = [p for p in manifest.get("consistency", []) if p["from_size"] == earlier.size]
    if not proofs:
        report.add(
            "consistency with saved checkpoint", [f"no consistency proof from size {earlier.size}"], ""
        )
        return
    try:
        verify_consistency(
            earlier.size,
            checkpoint.size,
            earlier.root_hash,
            checkpoint.root_hash,
            _hashes(proofs[0]["proof"]),
        )
    except ProofError as error:
        report.add("consistency with saved checkpoint", [str(error)], "")
        return
    report.add(
        "consistency with saved checkpoint", [], f"size {earlier.size} → {checkpoint.size} append-only"
    )


def _hashes(items: Sequence[str]) -> list[bytes]:
    try:
        out = [base64.b64decode(h, validate=True) for h in items]
    except (binascii.Error, ValueError):
        raise ProofError("a proof hash is not base64") from None
    if any(len(h) != 32 for h in out):
        raise ProofError("a proof hash is not 32 bytes")
    return out


def _check_batches(items: list[dict[str, Any]], keys: PinnedKeys, report: Report) -> list[_Batch]:
    out: list[_Batch] = []
    problems: list[str] = []
    for item in items:
        header_text: str = item["header"]
        header = json.loads(header_text)
        blob = base64.b64decode(item["leaf_hashes"], validate=True)
        leaves = [blob[i : i + 32] for i in range(0, len(blob), 32)]
        batch = _Batch(
            header["agent_id"],
            header["first_seq"],
            header["last_seq"],
            header["count"],
            leaves,
            item["seqs"],
            False,
        )
        out.append(batch)
        where = f"batch {batch.agent_id}:{batch.first_seq}-{batch.last_seq}"
        raw_header = header_text.encode()
        public_key = keys.agents.get(header["key_id"])
        if canonical_bytes(header) != raw_header:
            problems.append(f"{where}: header is not canonical")
        elif public_key is None:
            problems.append(f"{where}: key {header['key_id']} is not pinned")
        elif not _signed(public_key, item["signature"], raw_header):
            problems.append(f"{where}: agent signature does not verify")
        elif len(leaves) != batch.count or root_of_leaves(leaves).hex() != header["merkle_root"]:
            problems.append(f"{where}: records do not hash to the signed merkle root")
        else:
            batch.valid = True
    report.add("agent batch headers", problems, f"{len(out)} batch headers signed by pinned agent keys")
    return out


def _signed(public_key: bytes, signature_b64: str, header: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(
            base64.b64decode(signature_b64, validate=True), BATCH_DOMAIN + header
        )
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True


def _check_inclusion(
    included: list[tuple[int, bytes]],
    checkpoint: Checkpoint | None,
    manifest: dict[str, Any],
    unlogged: list[str],
    report: Report,
) -> None:
    problems = list(unlogged)
    problems += [f"logged record {r} is missing from the export" for r in manifest.get("missing_records", [])]
    if checkpoint is None:
        problems.append("no valid checkpoint to check inclusion against")
    else:
        included.sort()
        try:
            root = root_from_multi_inclusion(
                [i for i, _ in included],
                [h for _, h in included],
                checkpoint.size,
                _hashes(manifest["bundle"]["hashes"]),
            )
            if root != checkpoint.root_hash:
                problems.append("the records and bundle do not lead to the checkpoint's root")
        except ProofError as error:
            problems.append(str(error))
    report.add("inclusion in checkpoint", problems, f"{len(included)} records proven in the signed log")


def _check_completeness(batches: list[_Batch], reported: dict[str, list[list[int]]], report: Report) -> None:
    covered: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for batch in batches:
        if batch.count == batch.last_seq - batch.first_seq + 1:
            covered[batch.agent_id].append((batch.first_seq, batch.last_seq))
        else:
            covered[batch.agent_id] += [(s, s) for s in batch.seqs or []]
    problems: list[str] = []
    for agent_id, spans in sorted(covered.items()):
        spans.sort()
        reach = spans[0][1]
        for first, last in spans[1:]:
            if first > reach + 1:
                problems.append(f"agent {agent_id} never delivered seq {reach + 1}-{first - 1}")
            reach = max(reach, last)
    for agent_id, gaps in sorted(reported.items()):
        problems += [f"platform reports agent {agent_id} missing seq {a}-{b}" for a, b in gaps]
    report.add("sequence completeness", problems, f"no gaps in {len(covered)} agents' sequences")


def _superseded_ids(invoice: dict[str, Any], scans: list[_Scan]) -> set[str]:
    """The record ids of the invoice's contract that a retry's verified decision superseded."""
    owner = (invoice["tenant"].encode(), invoice["contract"].encode())
    return {
        record_id.decode()
        for tenant, contract, record_id in (c for s in scans for c in s.supersedes)
        if (tenant, contract) == owner
    }


def _has_metric_lines(invoice: dict[str, Any]) -> bool:
    metrics = invoice.get("metrics") or {}
    return any(
        x["kind"] == "usage" and x["dimension"] in metrics and "catalogue" not in x for x in invoice["lines"]
    )


def _rates_records(invoice: dict[str, Any]) -> bool:
    """Whether a line is rated from the records one by one: catalogue lines, custom-metric lines."""
    return invoice.get("catalogue") is not None or _has_metric_lines(invoice)


def _billable(invoice: dict[str, Any], lines: list[bytes], superseded: set[str]) -> list[dict[str, Any]]:
    """The records the platform rates (``metrics.billable_records``), parsed from the lines."""
    return billable_records(
        map(load_record, lines),
        invoice["tenant"],
        invoice["contract"],
        invoice["period_start_ns"],
        invoice["period_end_ns"],
        superseded,
    )


def _check_catalogue(invoice: dict[str, Any], billable: list[dict[str, Any]], report: Report) -> None:
    """Lines priced by the LLM price catalogue (``catalogue``): the billable records' tokens per model
    and day."""
    if invoice.get("catalogue") is None:
        report.skip("catalogue lines", "the contract is not priced by the model price catalogue")
        return
    days: DayTokens = {}
    for record in billable:
        add_record(days, record)
    problems, good = catalogue_problems(invoice, days)
    report.add("catalogue lines", problems, good)


def _check_metrics(
    invoice: dict[str, Any], prices: dict[str, Any], billable: list[dict[str, Any]], report: Report
) -> None:
    """Usage lines of the contract's custom metrics (the export's pinned ``metrics``: code → expression),
    re-measured from the billable records of the invoice (status ok, not superseded) and re-rated from
    the pinned terms (``metrics.metric_verdicts``); an export without ``metrics`` leaves them SKIP
    (`_check_lines`)."""
    if not _has_metric_lines(invoice):
        return
    for check, problems, good in metric_verdicts(invoice, prices, billable):
        report.add(check, problems, good)


def _add(report: Report, finding: Finding) -> None:
    if finding.problems is None:
        report.skip(finding.check, finding.detail)
    else:
        report.add(finding.check, finding.problems, finding.detail)


def _check_outcomes(
    invoice: dict[str, Any],
    prices: dict[str, Any],
    scans: list[_Scan],
    lines: list[bytes],
    superseded: set[str],
    report: Report,
) -> None:
    """The outcome line from its billed outcomes and the pinned terms (``credits``); the records that
    declared them, when in this export, are read again (only those)."""
    wanted = outcome_record_ids(invoice)
    records: dict[str, dict[str, Any]] = {}
    for line in _lines_of(scans, lines, {record_id.encode() for record_id in wanted}):
        record = load_record(line)
        if isinstance(record, dict) and record.get("record_id") in wanted:
            records[record["record_id"]] = record
    for finding in outcome_findings(invoice, prices, records, superseded):
        _add(report, finding)


def _check_service_credits(invoice: dict[str, Any], report: Report) -> None:
    """SLA service-credit lines from their stated ladder step and fee basis (``credits``)."""
    for finding in service_credit_findings(invoice):
        _add(report, finding)


def _check_commercial(invoice: dict[str, Any], report: Report) -> None:
    """The base fee, true-up and discount lines from the pinned commercial terms (``commercial``)."""
    if "terms" not in invoice:
        report.skip("fees, true-up and discounts", "an export without its commercial terms: not re-derived")
        return
    problems, good = commercial_problems(invoice)
    report.add("fees, true-up and discounts", problems, good)


def _check_totals(invoice: dict[str, Any], report: Report) -> None:
    """The subtotal, tax and total from the lines and the pinned tax terms (``taxes``)."""
    if "tax_terms" not in invoice:
        report.skip("invoice totals", "an export without its tax terms: not re-derived")
        return
    problems, good = totals_problems(invoice)
    report.add("invoice totals", problems, good)


def _check_versions(
    invoice: dict[str, Any],
    terms: dict[str, Any] | None,
    dimension: str,
    measured: Decimal,
    stated_total: Decimal,
    report: Report,
) -> None:
    """A dimension whose price changed within the period: its version lines' quantities together must
    be the records', and each line's amount (and the bound line's) what its version's terms give for
    the stated segment quantities (`rating.segment_amounts`). The records' split between the segments
    is not re-derived: only their sum."""
    check = f"line usage {dimension}"
    ours = [x for x in invoice["lines"] if x["kind"] == "usage" and x["dimension"] == dimension]
    problems = []
    if stated_total != measured:
        problems.append(f"quantities add up to {stated_total.normalize():f} but the records give {measured}")
    versions = {v["effective_from"]: v for v in (terms or {}).get("versions", [])}
    segments = [x for x in ours if "segment_start" in x]
    bounds = [x for x in ours if "segment_start" not in x]
    unknown = [x["effective_from"] for x in segments if x["effective_from"] not in versions]
    if terms is None or unknown or len(bounds) > 1:
        report.add(check, [*problems, "the lines name price versions the export does not hold"], "")
        return
    currency = invoice["currency"]
    try:
        pairs = [(versions[x["effective_from"]], Decimal(x["quantity"])) for x in segments]
        amounts, bound = segment_amounts(pairs, terms, currency)
        stated = [Decimal(x["amount"]) for x in segments]
        stated_bound = Decimal(bounds[0]["amount"]) if bounds else None
    except (InvalidOperation, KeyError, TypeError, ValueError, StopIteration) as error:
        report.add(check, [*problems, f"the version lines cannot be re-rated: {error!r}"], "")
        return
    for line, amount, expected in zip(segments, stated, amounts, strict=True):
        if amount != expected:
            problems.append(
                f"version from {line['effective_from'] or 'the contract start'}: amount {amount} {currency} "
                f"but its terms give {expected} (off by {amount - expected} {currency})"
            )
    if stated_bound != bound:
        problems.append(f"period bound line {stated_bound} {currency} but the newest terms give {bound}")
    good = (
        f"quantity {measured} over {len(segments)} price versions = "
        f"{sum(stated, Decimal(0)) + (stated_bound or 0)} {currency}"
    )
    report.add(check, problems, good)


def _check_lines(
    invoice: dict[str, Any], prices: dict[str, Any], usage: list[int], records: int, report: Report
) -> None:
    """Usage lines of built-in dimensions: quantity from the records; amounts to the cent under every
    charge model (`rating.charge_amount`). A
    dimension whose price changed within the period has a line per version (`segment_start`) and maybe
    a period-bound line: their quantities together must be the records'; amounts are not re-rated."""
    currency = invoice["currency"]
    if invoice["record_count"] != records:
        report.add(
            "record count", [f"invoice counts {invoice['record_count']} records, export holds {records}"], ""
        )
    else:
        report.add("record count", [], f"{records} records")
    segmented: dict[str, Decimal] = {}
    for line in invoice["lines"]:
        if line["kind"] == "usage" and "segment_start" in line:
            segmented[line["dimension"]] = Decimal(0)
    for line in invoice["lines"]:
        if line["kind"] == "usage" and line["dimension"] in segmented:
            try:
                segmented[line["dimension"]] += Decimal(line["quantity"])
            except InvalidOperation:
                continue  # reported below, with the line
    checked_versions: set[str] = set()
    for line in invoice["lines"]:
        dimension, kind = line["dimension"], line["kind"]
        check = f"line {kind} {dimension}".rstrip()
        if "catalogue" in line:
            continue  # priced by the model price catalogue: `_check_catalogue`
        if kind == "usage" and dimension in (invoice.get("metrics") or {}):
            continue  # a custom metric of the pinned terms: `_check_metrics`
        if kind == "service_credit" or (kind == "usage" and dimension == "outcomes"):
            continue  # from their stated details: `_check_service_credits`, `_check_outcomes`
        if kind == "adjustment":
            continue  # late usage of an earlier invoice, from its pinned terms: `_check_late_usage`
        if kind == "usage" and dimension not in rating.DIMENSIONS and "metrics" in invoice:
            report.add(check, ["neither a built-in dimension nor a metric of the pinned terms"], "")
            continue
        if kind != "usage" or dimension not in rating.DIMENSIONS:
            report.skip(check, "not derived from records: not re-rated")
            continue
        terms = prices.get(dimension)
        try:
            stated, amount = Decimal(line["quantity"]), Decimal(line["amount"])
        except InvalidOperation:
            report.add(check, ["figures are not decimals"], "")
            continue
        measured = rating.quantity(dimension, usage[rating.DIMENSIONS.index(dimension)])
        if dimension in segmented:
            if dimension not in checked_versions:
                checked_versions.add(dimension)
                _check_versions(
                    invoice, prices.get(dimension), dimension, measured, segmented[dimension], report
                )
            continue
        problems = [] if stated == measured else [f"quantity {stated} but the records give {measured}"]
        if terms is None:
            problems.append("the contract prices no such dimension")
        elif terms["charge_model"] not in rating.CHARGE_MODELS:
            problems.append(f"unknown charge model {terms['charge_model']!r}")
        else:
            # A built-in dimension has no value field: only `outcomes` (`_check_outcomes`) does.
            expected = rating.charge_amount(terms, measured, Decimal(0), currency)
            if amount != expected:
                problems.append(
                    f"amount {amount} {currency} but the contract terms give {expected} "
                    f"(off by {amount - expected} {currency})"
                )
        if terms is not None and terms["charge_model"] != "per_unit":
            report.add(check, problems, f"{measured} at {terms['charge_model']} = {amount} {currency}")
        else:
            unit = terms["properties"].get("unit_price") if terms else None
            report.add(check, problems, f"{measured} × {unit} = {amount} {currency}")
