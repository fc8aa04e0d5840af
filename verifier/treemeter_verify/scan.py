"""Every per-line check of an export's record lines, in forked processes when there are many.

The lines stay the one bytes object the export came in (`RecordLines`): a forked scanner inherits it
without a copy, and splits only its own share, cut at a line near an equal byte count (a run of lines
cut there becomes two runs). What a scan yields (`Scan`) is small: problems, record ids, leaf hashes,
the log indices as (first, count) ranges, and summed usage.
"""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import re
import signal
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from hashlib import sha256
from typing import Any, TypeVar, overload

from . import rating
from .records import fullmatch_record, load_record, match_record, record_fields, usage_of_columns, writes_hold
from .routed import is_routed, routing_problem, superseded_ids


@dataclass
class Batch:
    """An agent-signed batch as the export states it: valid until a check of its header, signature or
    merkle root fails."""

    agent_id: str
    first_seq: int
    last_seq: int
    count: int
    leaf_hashes: bytes  # 32 bytes per record, in batch order
    seqs: list[int] | None
    merkle_root: str  # signed, hex: what the leaves must hash to
    valid: bool = True

    @property
    def size(self) -> int:
        """How many whole leaf hashes it holds."""
        return len(self.leaf_hashes) // LEAF

    def joined_leaves(self, start: int, end: int) -> bytes:
        """The leaf hashes of its lines [start, end), joined."""
        return self.leaf_hashes[start * LEAF : end * LEAF]

    def leaves(self, start: int = 0, end: int | None = None) -> list[bytes]:
        return split_leaves(self.joined_leaves(start, self.size if end is None else end))


LEAF = 32  # bytes of a leaf hash


def split_leaves(joined: bytes) -> list[bytes]:
    """Joined leaf hashes, one by one."""
    return [joined[k : k + LEAF] for k in range(0, len(joined), LEAF)]


class RecordLines(Sequence[bytes]):
    """The record lines of an export body, from byte ``start`` on (a final newline ends the last line),
    not split until a check reads them one by one. Counting them keeps the number of the line at every
    ``MARK`` bytes, so that the line at a byte is found without counting from the start again."""

    MARK = 1 << 26

    def __init__(self, body: bytes, start: int = 0) -> None:
        end = len(body) - 1 if body.endswith(b"\n") else len(body)
        self.body, self.start, self.end = body, start, max(start, end)
        self._marks = [(start, 0)]  # (byte, the number of its line)
        for mark in range(start + self.MARK, self.end, self.MARK):
            self._marks.append((mark, self._marks[-1][1] + body.count(b"\n", self._marks[-1][0], mark)))
        last, before = self._marks[-1]
        self.size = before + body.count(b"\n", last, self.end) + 1 if self.end > start else 0
        self._split: list[bytes] | None = None

    def line_after(self, newline: int) -> int:
        """The number of the line that starts after the newline at byte ``newline``."""
        mark, before = self._marks[bisect_right(self._marks, (newline, self.size)) - 1]
        return before + self.body.count(b"\n", mark, newline + 1)

    @classmethod
    def of(cls, lines: Sequence[bytes]) -> RecordLines:
        if isinstance(lines, RecordLines):
            return lines
        joined = cls(b"\n".join(lines))
        joined.size, joined._split = len(lines), list(lines)  # one empty line joins to nothing
        return joined

    def split(self) -> list[bytes]:
        if self._split is None:
            self._split = self.body[self.start : self.end].split(b"\n") if self.size else []
        return self._split

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, index: int) -> bytes: ...
    @overload
    def __getitem__(self, index: slice) -> list[bytes]: ...
    def __getitem__(self, index: int | slice) -> bytes | list[bytes]:
        return self.split()[index]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.split())


T = TypeVar("T")

# A run of record lines: (first line, count, first log index, batch slot, first line in the batch);
# an unlogged run has None for the last three.
Run = tuple[int, int, int | None, int | None, int | None]


@dataclass
class Scope:
    lines: Sequence[bytes]
    batches: list[Batch]
    invoice: dict[str, Any]
    agents: dict[str, bytes]  # pinned agent (and router) keys by key id


@dataclass
class Scan:
    """What some runs of record lines yield: problems, ids, logged leaves with their log indices as
    (first, count) ranges, summed billable usage, how many records are routed (format v2), the (tenant,
    contract, record id) that their decisions supersede, the lines that are not records (from the
    scan's first), which place the record ids on their lines, and whether every logged run passed as a
    whole (`exact`: its leaves are its batch's)."""

    unsigned: list[str] = field(default_factory=list)
    unlogged: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    record_ids: list[bytes] = field(default_factory=list)
    indices: list[tuple[int, int]] = field(default_factory=list)
    leaves: bytes = b""
    usage: list[int] = field(default_factory=lambda: [0] * len(rating.DIMENSIONS))
    routed: int = 0
    misrouted: list[str] = field(default_factory=list)
    supersedes: list[tuple[bytes, bytes, bytes]] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    exact: bool = True


class RunsError(ValueError):
    """The manifest's runs do not describe the record lines."""


def place_runs(runs: list[list[Any]], lines: int) -> list[Run]:
    """The manifest's runs [count, first index, slot, first line], checked and placed on the record lines."""
    out: list[Run] = []
    offset = 0
    for count, first, slot, position in runs:
        if not isinstance(count, int) or count < 1:
            raise RunsError("a run must count at least one line")
        if first is None and slot is None and position is None:
            out.append((offset, count, None, None, None))
        elif all(isinstance(x, int) for x in (first, slot, position)):
            out.append((offset, count, first, slot, position))
        else:
            raise RunsError("a logged run needs a log index, a batch slot and a line")
        offset += count
    if offset != lines:
        raise RunsError(f"the runs cover {offset} lines, the export holds {lines}")
    return out


# What forked scanners read (inherited, never pickled): the lines, and per share its first and end byte
# and its runs (line offsets from the share's first line).
_SHARES: list[tuple[int, int, list[Run]]] = []
_SCOPE: Scope | None = None
LINES_PER_JOB = 50_000  # fewer lines than this per process: forking costs more than it saves


def scan_all(scope: Scope, runs: list[Run], jobs: int, meanwhile: Callable[[], T]) -> tuple[list[Scan], T]:
    """Scan the runs, in ``jobs`` forked processes when there are enough lines (about equal bytes), and
    what ``meanwhile`` returns, called in this process while they scan."""
    global _SHARES, _SCOPE
    jobs = max(1, min(jobs, len(scope.lines) // LINES_PER_JOB))
    if jobs == 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [_scan_paused(scope, runs)], meanwhile()
    lines = RecordLines.of(scope.lines)
    _SCOPE, _SHARES = replace(scope, lines=lines), _shares(lines, runs, jobs)
    pool = multiprocessing.get_context("fork").Pool(len(_SHARES), _scanner_started)
    try:
        scanning = pool.map_async(_scan_forked, range(len(_SHARES)))
        other = meanwhile()
        scans = scanning.get()
    except BaseException:
        pool.terminate()
        raise
    finally:
        _SHARES, _SCOPE = [], None
    # Closed, not terminated: a scanner left without a share ends when told to. A SIGTERM could reach
    # it before it reset the handler it inherited (a caller's, which may not exit) and leave it
    # waiting for work for ever, and the join with it.
    pool.close()
    pool.join()
    return scans, other


def _scanner_started() -> None:
    """A forked scanner: default signal dispositions, and no cycle collection (see `_scan_paused`)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    gc.disable()


def _shares(lines: RecordLines, runs: list[Run], jobs: int) -> list[tuple[int, int, list[Run]]]:
    """Cut the lines into up to ``jobs`` shares of about equal bytes, each at least one line: (first
    byte, end byte, its runs from its first line)."""
    body, start, end = lines.body, lines.start, lines.end
    cuts: list[tuple[int, int]] = []  # (line, byte) where a share starts
    for k in range(1, jobs):
        newline = body.find(b"\n", start + (end - start) * k // jobs, end)
        if newline < 0:
            break
        line = lines.line_after(newline)
        if line > (cuts[-1][0] if cuts else 0):
            cuts.append((line, newline + 1))
    bounds: list[tuple[int, int]] = [(0, start), *cuts, (lines.size, end + 1)]
    shares = []
    for (first_line, first_byte), (end_line, end_byte) in itertools.pairwise(bounds):
        part = [
            _shifted(run, first_line, end_line)
            for run in runs
            if run[0] < end_line and run[0] + run[1] > first_line
        ]
        shares.append((first_byte, end_byte - 1, part))
    return shares


def _shifted(run: Run, first_line: int, end_line: int) -> Run:
    """The part of a run on lines [first_line, end_line), with its line offset from first_line."""
    offset, count, first, slot, position = run
    cut = max(first_line - offset, 0)
    count = min(offset + count, end_line) - offset - cut
    if first is None or position is None:
        return (offset + cut - first_line, count, None, None, None)
    return (offset + cut - first_line, count, first + cut, slot, position + cut)


def _scan_forked(number: int) -> Scan:
    scope = _SCOPE
    assert scope is not None and isinstance(scope.lines, RecordLines)
    first_byte, end_byte, part = _SHARES[number]
    lines = scope.lines.body[first_byte:end_byte].split(b"\n")
    return scan(replace(scope, lines=lines), part)


def _scan_paused(scope: Scope, runs: list[Run]) -> Scan:
    """`scan` with the cycle collector paused: a scan makes millions of objects and no cycles, and a
    collection pass over them costs more than it frees (a forked scanner never collects)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return scan(scope, runs)
    finally:
        if paused:
            gc.enable()


def scan(scope: Scope, runs: list[Run]) -> Scan:
    """Every check on every line of the runs. A run whose lines are all canonical records of one valid
    batch is checked as a whole (C-level passes over its lines: one hash each, one regular-expression
    match each, set/min/max over the columns); any doubt sends it through the per-line loop, which
    names each failing record."""
    out = Scan()
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
            out.exact = out.exact and first is None
            _scan_lines(lines, run, scope, bounds, out, leaves, matched, parsed)
            continue
        record_ids, run_leaves, usage = whole
        out.record_ids += record_ids
        out.indices.append((first, count))
        leaves.append(run_leaves)
        parsed.append(usage)
    out.leaves = b"".join(leaves)
    matched_usage = usage_of_columns(list(zip(*matched, strict=True)))
    out.usage = [sum(column) for column in zip(matched_usage, *parsed, strict=True)]
    return out


def _scan_run(
    lines: Sequence[bytes], first: int | None, position: int | None, batch: Batch, bounds: tuple[Any, ...]
) -> tuple[tuple[bytes, ...], bytes, tuple[int, ...]] | None:
    """A run's record ids, joined leaf hashes and billable usage when every line passes every check."""
    count = len(lines)
    if not batch.valid or position is None or not 0 <= position <= batch.size - count:
        return None
    matches = list(map(fullmatch_record, lines))
    if None in matches:
        return None
    columns = list(zip(*map(re.Match.groups, matches), strict=True))  # type: ignore[arg-type]
    agents, contracts, _, _, _, _, _, cached, writes, record_ids, seqs, starts, statuses, tenants, tin, _ = (
        columns
    )
    if any(writes) and not all(map(_writes_hold, writes, cached, tin)):
        return None
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
        or run_leaves != batch.joined_leaves(position, position + count)
    ):
        return None
    billable = None if set(statuses) == {b"ok"} else [status == b"ok" for status in statuses]
    return record_ids, run_leaves, tuple(usage_of_columns(columns, billable))


def _writes_hold(writes: bytes | None, cached: bytes, tokens_in: bytes) -> bool:
    return writes is None or writes_hold(writes, cached, tokens_in)


def _scan_lines(
    lines: Sequence[bytes],
    run: Run,
    scope: Scope,
    bounds: tuple[Any, ...],
    out: Scan,
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
            or not 0 <= line_in_batch < batch.size
            or batch.joined_leaves(line_in_batch, line_in_batch + 1) != leaf
            or agent_id != batch.agent_id.encode()
            or not batch.first_seq <= seq <= batch.last_seq
        ):
            out.unsigned.append(f"{record_id.decode()} is not covered by a valid agent batch signature")
        if first is None:
            out.unlogged.append(f"{record_id.decode()} is not in the log")
        else:
            out.indices.append((first + k, 1))
            leaves.append(leaf)
        if record_tenant != tenant or record_contract != contract or not start <= start_ns < end:
            out.foreign.append(f"{record_id.decode()} does not belong to this invoice")


def _scan_routed(
    record: dict[str, Any], owner: tuple[bytes, bytes, bytes], agents: dict[str, bytes], out: Scan
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
