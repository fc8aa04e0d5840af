"""Subtree hashes read from the stored log (leaves, node strata): what proof generation asks for."""

from __future__ import annotations

from treemeter_records.merkle import node_hash

from .merkle import fold, perfect_ranges
from .models import STRATUM, LogLeaf, LogNode


class StoredTree:
    """MTH(D[lo:hi]) for ranges of a stored tree, with the rows read once per request.

    A perfect subtree on a stored stratum is one row; one between strata is folded from at most
    2**STRATUM rows of the stratum below (leaves for levels under STRATUM). So a proof costs O(log n)
    queries of bounded size.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._leaves: dict[int, bytes] = {}
        self._nodes: dict[tuple[int, int], bytes] = {}

    def prefetch_leaves(self, lo: int, hi: int) -> None:
        self._leaves.update(
            (index, bytes(h))
            for index, h in LogLeaf.objects.filter(index__gte=lo, index__lt=hi).values_list(
                "index", "leaf_hash"
            )
        )

    def subtree(self, lo: int, hi: int) -> bytes:
        if not 0 <= lo < hi <= self.size:
            raise ValueError(f"range [{lo}, {hi}) is outside the tree of size {self.size}")
        return fold([self.perfect(level, index) for level, index in perfect_ranges(lo, hi)])

    def perfect(self, level: int, index: int) -> bytes:
        if level == 0:
            return self._leaf_range(index, index + 1)[0]
        if level % STRATUM == 0:
            key = (level, index)
            if key not in self._nodes:
                self._load_nodes(level, index, index + 1)
            return self._nodes[key]
        base = level - level % STRATUM
        width = 1 << (level - base)
        first = index * width
        if base == 0:
            hashes = self._leaf_range(first, first + width)
        else:
            self._load_nodes(base, first, first + width)
            hashes = [self._nodes[(base, i)] for i in range(first, first + width)]
        while len(hashes) > 1:
            hashes = [node_hash(hashes[i], hashes[i + 1]) for i in range(0, len(hashes), 2)]
        return hashes[0]

    def _leaf_range(self, lo: int, hi: int) -> list[bytes]:
        if any(i not in self._leaves for i in range(lo, hi)):
            self.prefetch_leaves(lo, hi)
        try:
            return [self._leaves[i] for i in range(lo, hi)]
        except KeyError as missing:
            raise LookupError(f"log leaf {missing} is missing") from None

    def _load_nodes(self, level: int, lo: int, hi: int) -> None:
        rows = LogNode.objects.filter(level=level, index__gte=lo, index__lt=hi).values_list("index", "hash")
        self._nodes.update(((level, i), bytes(h)) for i, h in rows)
        if any((level, i) not in self._nodes for i in range(lo, hi)):
            raise LookupError(f"log nodes {level}/{lo}..{hi} are missing")
