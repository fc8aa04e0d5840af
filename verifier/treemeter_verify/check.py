"""verify_export: every check of an invoice export, each with a verdict."""

from __future__ import annotations

import base64
import binascii
import json
import multiprocessing
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from hashlib import sha256
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from . import rating
from .canonical import canonical_bytes
from .keys import PinnedKeys
from .merkle import ProofError, root_from_multi_inclusion, root_of_leaves, verify_consistency
from .note import Checkpoint, NoteError, open_checkpoint
from .records import fields_of

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


def read_export(body: bytes) -> tuple[dict[str, Any], list[bytes]]:
    """Split an export body into its manifest and record lines."""
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
    log_indices, slots, positions = _expand(manifest["runs"], len(lines))
    scans = _scan_all(_Scope(lines, batches, slots, positions, log_indices, invoice), jobs)
    unsigned = [p for scan in scans for p in scan.unsigned]
    unlogged = [p for scan in scans for p in scan.unlogged]
    foreign = [p for scan in scans for p in scan.foreign]
    record_ids = [r for scan in scans for r in scan.record_ids]
    if len(set(record_ids)) != len(record_ids):
        foreign.append("a record id appears more than once")
    usage = [sum(column) for column in zip(*(scan.usage for scan in scans), strict=True)]
    included = [
        (index, scan.leaves[32 * k : 32 * k + 32]) for scan in scans for k, index in enumerate(scan.indices)
    ]
    report.add("batch signatures", unsigned, f"{len(lines)} records in {len(batches)} agent-signed batches")
    report.add("records belong to the invoice", foreign, f"{len(lines)} records of {invoice['contract']}")
    _check_inclusion(included, checkpoint, manifest, unlogged, report)
    _check_completeness(batches, manifest.get("reported_gaps", {}), report)
    _check_lines(invoice, manifest["prices"], usage, len(lines), report)


@dataclass
class _Scope:
    lines: list[bytes]
    batches: list[_Batch]
    slots: list[int | None]
    positions: list[int | None]
    log_indices: list[int | None]
    invoice: dict[str, Any]


@dataclass
class _Scan:
    """What one slice of the record lines yields: problems, ids, logged leaves, summed billable usage."""

    unsigned: list[str] = field(default_factory=list)
    unlogged: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    record_ids: list[bytes] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)
    leaves: bytes = b""
    usage: list[int] = field(default_factory=lambda: [0] * len(rating.DIMENSIONS))


_SCOPE: _Scope | None = None  # what forked scanners read (inherited, never pickled)


def _expand(runs: list[list[Any]], lines: int) -> tuple[list[Any], list[Any], list[Any]]:
    """Per line: log index, batch slot, line in batch, from runs [count, first index, slot, first line]."""
    log_indices: list[Any] = []
    slots: list[Any] = []
    positions: list[Any] = []
    for count, first, slot, position in runs:
        if not isinstance(count, int) or count < 1:
            raise ExportError("a run must count at least one line")
        if first is None:
            log_indices += [None] * count
            slots += [None] * count
            positions += [None] * count
        elif all(isinstance(x, int) for x in (first, slot, position)):
            log_indices += range(first, first + count)
            slots += [slot] * count
            positions += range(position, position + count)
        else:
            raise ExportError("a logged run needs a log index, a batch slot and a line")
    if len(log_indices) != lines:
        raise ExportError(f"the runs cover {len(log_indices)} lines, the export holds {lines}")
    return log_indices, slots, positions


def _scan_all(scope: _Scope, jobs: int) -> list[_Scan]:
    global _SCOPE
    n = len(scope.lines)
    jobs = max(1, min(jobs, n // 50_000))
    if jobs == 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [_scan(scope, 0, n)]
    step = -(-n // jobs)
    _SCOPE = scope
    try:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            return pool.map(_scan_forked, [(lo, min(lo + step, n)) for lo in range(0, n, step)])
    finally:
        _SCOPE = None


def _scan_forked(span: tuple[int, int]) -> _Scan:
    assert _SCOPE is not None
    return _scan(_SCOPE, *span)


def _scan(scope: _Scope, lo: int, hi: int) -> _Scan:
    out = _Scan()
    invoice, batches = scope.invoice, scope.batches
    tenant, contract = invoice["tenant"].encode(), invoice["contract"].encode()
    agents = [batch.agent_id.encode() for batch in batches]
    start, end = invoice["period_start_ns"], invoice["period_end_ns"]
    leaves: list[bytes] = []
    billable: list[tuple[int, ...]] = []
    hash_of, read = sha256, fields_of
    for n in range(lo, hi):
        line = scope.lines[n]
        leaf = hash_of(b"\x00" + line).digest()
        fields = read(line)
        if fields is None:
            out.foreign.append(f"line {n + 1} is not a record")
            continue
        record_id, agent_id, seq, record_tenant, record_contract, start_ns, status, amounts = fields
        out.record_ids.append(record_id)
        slot, position = scope.slots[n], scope.positions[n]
        batch = batches[slot] if slot is not None and 0 <= slot < len(batches) else None
        if (
            batch is None
            or position is None
            or not batch.valid
            or not 0 <= position < len(batch.leaves)
            or batch.leaves[position] != leaf
            or agent_id != agents[slot]  # type: ignore[index]
            or not batch.first_seq <= seq <= batch.last_seq
        ):
            out.unsigned.append(f"{record_id.decode()} is not covered by a valid agent batch signature")
        index = scope.log_indices[n]
        if index is None:
            out.unlogged.append(f"{record_id.decode()} is not in the log")
        else:
            out.indices.append(index)
            leaves.append(leaf)
        if record_tenant != tenant or record_contract != contract or not start <= start_ns < end:
            out.foreign.append(f"{record_id.decode()} does not belong to this invoice")
        if status == b"ok":
            billable.append(amounts)
    out.leaves = b"".join(leaves)
    if billable:
        out.usage = [sum(column) for column in zip(*billable, strict=True)]
    return out


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


def _check_lines(
    invoice: dict[str, Any], prices: dict[str, Any], usage: list[int], records: int, report: Report
) -> None:
    """Usage lines of built-in dimensions: quantity from the records; per_unit amounts to the cent."""
    currency = invoice["currency"]
    if invoice["record_count"] != records:
        report.add(
            "record count", [f"invoice counts {invoice['record_count']} records, export holds {records}"], ""
        )
    else:
        report.add("record count", [], f"{records} records")
    for line in invoice["lines"]:
        dimension, kind = line["dimension"], line["kind"]
        check = f"line {kind} {dimension}".rstrip()
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
        problems = [] if stated == measured else [f"quantity {stated} but the records give {measured}"]
        if terms is None:
            problems.append("the contract prices no such dimension")
        elif terms["charge_model"] != "per_unit":
            if not problems:
                report.skip(
                    check, f"quantity {measured} verified; {terms['charge_model']} charge not re-rated"
                )
                continue
        else:
            expected = rating.per_unit_amount(measured, terms, currency)
            if amount != expected:
                problems.append(f"amount {amount} {currency} but the contract terms give {expected}")
        unit = terms["properties"].get("unit_price") if terms else None
        report.add(check, problems, f"{measured} × {unit} = {amount} {currency}")
