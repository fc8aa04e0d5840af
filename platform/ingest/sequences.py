"""Per-agent sequence ranges: detect duplicates and gaps in O(batch + ranges), without reading records."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise

Range = tuple[int, int]  # inclusive


def runs(seqs: Iterable[int]) -> list[Range]:
    """Collapse sorted, distinct sequence numbers into inclusive runs: 1,2,3,7 → (1,3),(7,7)."""
    result: list[Range] = []
    for seq in seqs:
        if result and seq == result[-1][1] + 1:
            result[-1] = (result[-1][0], seq)
        else:
            result.append((seq, seq))
    return result


def merge(ranges: Iterable[Range]) -> list[Range]:
    """Union of inclusive ranges, adjacent ones joined."""
    merged: list[Range] = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def covered(ranges: Sequence[Range], seqs: Sequence[int]) -> set[int]:
    """The members of sorted `seqs` that fall inside sorted, disjoint `ranges`."""
    found: set[int] = set()
    index = 0
    for seq in seqs:
        while index < len(ranges) and ranges[index][1] < seq:
            index += 1
        if index == len(ranges):
            break
        if ranges[index][0] <= seq:
            found.add(seq)
    return found


def holes(ranges: Sequence[Range]) -> list[Range]:
    """The missing runs between consecutive sorted, disjoint ranges."""
    return [(a[1] + 1, b[0] - 1) for a, b in pairwise(ranges) if b[0] > a[1] + 1]
