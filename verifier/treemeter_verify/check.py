"""verify_export: every check of an invoice export, each with a verdict."""

from __future__ import annotations

import base64
import binascii
import gzip
import itertools
import json
import operator
import zlib
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
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
from .events import event_findings
from .gray import gray_records
from .keys import PinnedKeys
from .late import late_usage_findings
from .merkle import ProofError, root_from_multi_inclusion, root_of_leaves, verify_consistency
from .metrics import billable_records, metric_verdicts
from .note import Checkpoint, NoteError, open_checkpoint
from .rating import segment_amounts
from .records import fields_of, load_record
from .scan import (
    LEAF,
    Batch,
    RecordLines,
    Run,
    RunsError,
    Scan,
    Scope,
    place_runs,
    scan_all,
    split_leaves,
)
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


GZIP_MAGIC = b"\x1f\x8b"


def read_export(body: bytes) -> tuple[dict[str, Any], RecordLines]:
    """Split an export body into its manifest and record lines (`RecordLines`: not split one by one
    until a check needs it); a gzip-compressed export (`compress=gzip`) is decompressed in memory
    first."""
    if body[:2] == GZIP_MAGIC:
        try:
            body = _gunzip(body)
        except (OSError, EOFError, zlib.error) as error:
            raise ExportError(f"the compressed export cannot be read: {error}") from None
    if not body:
        raise ExportError("the export is empty")
    newline = body.find(b"\n")
    first = body if newline < 0 else body[:newline]
    try:
        manifest = json.loads(first)
    except ValueError as error:
        raise ExportError(f"the manifest line is not JSON: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ExportError(f"not a {FORMAT} export")
    return manifest, RecordLines(body, len(body) if newline < 0 else newline + 1)


def _gunzip(packed: bytes) -> bytes:
    """Decompress in memory. The platform writes one gzip member, whose trailer states its size (mod
    2**32): inflated into a buffer of that size at once, a third faster than `gzip.decompress`. A result
    of another size means more members (zlib stops after the first): those go through `gzip.decompress`."""
    size = int.from_bytes(packed[-4:], "little")
    body = zlib.decompress(packed, wbits=31, bufsize=max(size, 1))
    return body if len(body) % 2**32 == size else gzip.decompress(packed)


def verify_export(
    manifest: dict[str, Any],
    lines: Sequence[bytes],
    keys: PinnedKeys,
    previous: str | None = None,
    jobs: int = 1,
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
    lines: Sequence[bytes],
    keys: PinnedKeys,
    previous: str | None,
    report: Report,
    jobs: int,
) -> None:
    invoice = manifest["invoice"]
    checkpoint = _check_checkpoint(manifest, keys, report)
    if previous is not None:
        _check_consistency(manifest, checkpoint, previous, keys, report)
    items = manifest["batches"]
    batches = [_read_batch(item) for item in items]
    try:
        runs = place_runs(manifest["runs"], len(lines))
    except RunsError as error:
        raise ExportError(str(error)) from None
    scope = Scope(lines, batches, invoice, keys.agents)
    proof = Proof(checkpoint, manifest["bundle"]["hashes"])
    scans, batch_problems, (proven, inclusion) = _scan_checked(scope, runs, items, keys, proof, jobs)
    report.add(
        "agent batch headers",
        [
            f"batch {batches[s].agent_id}:{batches[s].first_seq}-{batches[s].last_seq}: {batch_problems[s]}"
            for s in sorted(batch_problems)
        ],
        f"{len(batches)} batch headers signed by pinned agent keys",
    )
    unsigned = [p for scan in scans for p in scan.unsigned]
    unlogged = [p for scan in scans for p in scan.unlogged]
    foreign = [p for scan in scans for p in scan.foreign]
    record_ids = [r for scan in scans for r in scan.record_ids]
    if len(set(record_ids)) != len(record_ids):
        foreign.append("a record id appears more than once")
    usage = [sum(column) for column in zip(*(scan.usage for scan in scans), strict=True)]
    superseded, unbilled = _superseded(scans, lines)
    retried = _superseded_ids(invoice, scans)
    gray, gray_usage = gray_records(invoice, lines, retried)
    usage = [total - left - grey for total, left, grey in zip(usage, unbilled, gray_usage, strict=True)]
    report.add("batch signatures", unsigned, f"{len(lines)} records in {len(batches)} agent-signed batches")
    report.add("records belong to the invoice", foreign, f"{len(lines)} records of {invoice['contract']}")
    misrouted = [p for scan in scans for p in scan.misrouted]
    _check_routing(sum(scan.routed for scan in scans), misrouted, report)
    _check_superseded(superseded, report)
    _check_inclusion(proven, inclusion, manifest, unlogged, report)
    _check_completeness(batches, manifest.get("reported_gaps", {}), report)
    _check_gray_release(invoice, gray, report)
    _check_lines(invoice, manifest["prices"], usage, len(lines), report)
    # Read again, once, only for an invoice whose lines need the records one by one.
    billable = _billable(invoice, lines, retried | gray) if _rates_records(invoice) else []
    _check_metrics(invoice, manifest["prices"], billable, report)
    _check_catalogue(invoice, billable, report)
    _check_events(invoice, manifest["prices"], lines, retried | gray, report)  # gray usage: no event
    _check_outcomes(invoice, manifest["prices"], scans, lines, retried, report)
    _check_service_credits(invoice, report)
    for finding in late_usage_findings(invoice, manifest.get("earlier_terms", {})):
        _add(report, finding)
    _check_commercial(invoice, report)
    _check_totals(invoice, report)
    _add(report, prepaid_credit_finding(invoice))


def _superseded(scans: list[Scan], lines: Sequence[bytes]) -> tuple[int, list[int]]:
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


def _lines_of(scans: list[Scan], lines: Sequence[bytes], record_ids: set[bytes]) -> Iterator[bytes]:
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


def _check_gray_release(invoice: dict[str, Any], gray: set[str], report: Report) -> None:
    """Records of gray-release stages with billing off (``gray_release``): in the export, never billed."""
    windows = invoice.get("gray_release") or []
    if not windows:
        report.skip("gray release", "no stage with billing off in the period")
        return
    report.add(
        "gray release", [], f"{len(gray)} records of {len(windows)} stages with billing off, not billed"
    )


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


@dataclass(frozen=True)
class Proof:
    """What the records' inclusion is checked against: the signed checkpoint (None: none verified) and
    the bundle's hashes of the log's other subtrees."""

    checkpoint: Checkpoint | None
    bundle: list[str]


def _scan_checked(
    scope: Scope, runs: list[Run], items: list[dict[str, Any]], keys: PinnedKeys, proof: Proof, jobs: int
) -> tuple[list[Scan], dict[int, str], tuple[int, str | None]]:
    """Scan the records while this process checks the batches and the inclusion of the leaf hashes the
    runs claim; scan again if a batch turns out invalid (the scan takes every batch for valid). The
    scans, the batch problems by slot, and how many records the inclusion check proves with its problem
    (None: none). The claimed leaves stand for the records' when every logged run passed as a whole."""
    batches = scope.batches

    def meanwhile() -> tuple[dict[int, str], Included | None, str | None]:
        claimed = _claimed(runs, batches)
        problem = _inclusion_problem(claimed, proof) if claimed is not None else None
        return _batch_problems(items, batches, keys), claimed, problem

    scans, (problems, claimed, claimed_problem) = scan_all(scope, runs, jobs, meanwhile)
    if problems:
        for slot in problems:
            batches[slot].valid = False
        scans, _ = scan_all(scope, runs, jobs, lambda: None)
    if claimed is not None and all(scan.exact for scan in scans):
        return scans, problems, (len(claimed[0]), claimed_problem)
    included = _included(scans)
    return scans, problems, (len(included[0]), _inclusion_problem(included, proof))


def _read_batch(item: dict[str, Any]) -> Batch:
    header = json.loads(item["header"])
    return Batch(
        header["agent_id"],
        header["first_seq"],
        header["last_seq"],
        header["count"],
        base64.b64decode(item["leaf_hashes"], validate=True),
        item["seqs"],
        str(header["merkle_root"]),
    )


def _batch_problems(items: list[dict[str, Any]], batches: list[Batch], keys: PinnedKeys) -> dict[int, str]:
    """Why a batch is not valid, by slot: its header is not canonical or not signed by a pinned key,
    or its leaf hashes are not as many as it counts or do not hash to its merkle root."""
    problems: dict[int, str] = {}
    for slot, (item, batch) in enumerate(zip(items, batches, strict=True)):
        raw_header = item["header"].encode()
        header = json.loads(raw_header)
        public_key = keys.agents.get(header["key_id"])
        if canonical_bytes(header) != raw_header:
            problems[slot] = "header is not canonical"
        elif public_key is None:
            problems[slot] = f"key {header['key_id']} is not pinned"
        elif not _signed(public_key, item["signature"], raw_header):
            problems[slot] = "agent signature does not verify"
        elif (
            len(batch.leaf_hashes) != LEAF * batch.count
            or root_of_leaves(batch.leaves()).hex() != batch.merkle_root
        ):
            problems[slot] = "records do not hash to the signed merkle root"
    return problems


def _signed(public_key: bytes, signature_b64: str, header: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(
            base64.b64decode(signature_b64, validate=True), BATCH_DOMAIN + header
        )
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True


Included = tuple[list[int], list[bytes]]  # log indices, ascending, and the leaf hashes at them


def _included(scans: list[Scan]) -> Included:
    """The log indices of the logged records and their leaf hashes, by index."""
    indices = [i for scan in scans for first, count in scan.indices for i in range(first, first + count)]
    return _by_index(indices, split_leaves(b"".join(scan.leaves for scan in scans)))


def _claimed(runs: list[Run], batches: list[Batch]) -> Included | None:
    """What `_included` finds when every logged line hashes to the leaf of its batch that its run names:
    the inclusion proof to check while the lines are scanned. None when a run names no such leaves."""
    indices: list[int] = []
    leaves: list[bytes] = []
    for _, count, first, slot, position in runs:
        if first is None:
            continue
        if slot is None or position is None or not 0 <= slot < len(batches):
            return None
        if not 0 <= position <= batches[slot].size - count:
            return None
        indices += range(first, first + count)
        leaves += batches[slot].leaves(position, position + count)
    return _by_index(indices, leaves)


def _by_index(indices: list[int], leaves: list[bytes]) -> Included:
    if any(map(operator.ge, indices, itertools.islice(indices, 1, None))):  # not the export's order
        pairs = sorted(zip(indices, leaves, strict=True))
        indices, leaves = [i for i, _ in pairs], [h for _, h in pairs]
    return indices, leaves


def _inclusion_problem(included: Included, proof: Proof) -> str | None:
    """Why the leaves at their indices and the bundle's hashes do not lead to the checkpoint's root, or
    None."""
    if proof.checkpoint is None:
        return "no valid checkpoint to check inclusion against"
    try:
        root = root_from_multi_inclusion(*included, proof.checkpoint.size, _hashes(proof.bundle))
    except ProofError as error:
        return str(error)
    return (
        None
        if root == proof.checkpoint.root_hash
        else "the records and bundle do not lead to the checkpoint's root"
    )


def _check_inclusion(
    count: int, problem: str | None, manifest: dict[str, Any], unlogged: list[str], report: Report
) -> None:
    problems = list(unlogged)
    problems += [f"logged record {r} is missing from the export" for r in manifest.get("missing_records", [])]
    if problem is not None:
        problems.append(problem)
    report.add("inclusion in checkpoint", problems, f"{count} records proven in the signed log")


def _check_completeness(batches: list[Batch], reported: dict[str, list[list[int]]], report: Report) -> None:
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


def _superseded_ids(invoice: dict[str, Any], scans: list[Scan]) -> set[str]:
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


def _billable(invoice: dict[str, Any], lines: Sequence[bytes], superseded: set[str]) -> list[dict[str, Any]]:
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


def _check_events(
    invoice: dict[str, Any],
    prices: dict[str, Any],
    lines: Sequence[bytes],
    superseded: set[str],
    report: Report,
) -> None:
    """Business-event lines of the units the invoice pins (``events``), re-derived from the export's
    records (``events.event_findings``: the lines are parsed again only for an invoice with such units)."""
    for finding in event_findings(invoice, prices, map(load_record, lines), superseded):
        _add(report, finding)


def _add(report: Report, finding: Finding) -> None:
    if finding.problems is None:
        report.skip(finding.check, finding.detail)
    else:
        report.add(finding.check, finding.problems, finding.detail)


def _check_outcomes(
    invoice: dict[str, Any],
    prices: dict[str, Any],
    scans: list[Scan],
    lines: Sequence[bytes],
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
        if kind == "usage" and dimension in (invoice.get("events") or {}):
            continue  # a business-event unit of the pinned terms: `_check_events`
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
