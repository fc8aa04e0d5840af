"""RFC 6962 / 9162 Merkle log arithmetic: appends, proofs and their checks.

The hashing itself (leaf, node, tree hash, empty root) is the records format's
(``treemeter_records.merkle``, the same leaf hash as each batch's own tree); this module adds what a log
needs on top of it. The standalone verifier keeps its own copy on purpose; tests/merkle_vectors.json
pins all of them to the same roots and proofs. No Django here.

Proof generation takes ``subtree(lo, hi)``, a function returning MTH(D[lo:hi]) for the ranges the RFC
recursion visits, so the same code serves the in-memory tests and the stored log.
Hashes are raw 32-byte ``bytes``.
"""

from __future__ import annotations

import hmac
import itertools
from collections.abc import Callable, Sequence

from treemeter_records.merkle import EMPTY_ROOT, node_hash

SubtreeHash = Callable[[int, int], bytes]


class ProofError(ValueError):
    """A proof does not verify, or its sizes are impossible."""


def split_point(n: int) -> int:
    """The largest power of two smaller than ``n`` (n >= 2): where RFC 6962 splits D[0:n]."""
    return 1 << ((n - 1).bit_length() - 1)


def perfect_ranges(lo: int, hi: int) -> list[tuple[int, int]]:
    """[lo, hi) as aligned perfect subtrees (level, index), largest first, when ``lo`` is aligned to them.

    Every range the RFC recursion visits decomposes this way, so its hash is the right-to-left fold of
    the perfect subtrees' hashes (see ``fold``).
    """
    out: list[tuple[int, int]] = []
    while lo < hi:
        level = (hi - lo).bit_length() - 1
        while lo & ((1 << level) - 1):
            level -= 1
        out.append((level, lo >> level))
        lo += 1 << level
    return out


def fold(hashes: Sequence[bytes]) -> bytes:
    """node(h0, node(h1, ... node(h[-2], h[-1]))): MTH of a range from its perfect subtrees, largest first."""
    if not hashes:
        return EMPTY_ROOT
    acc = hashes[-1]
    for h in reversed(hashes[:-1]):
        acc = node_hash(h, acc)
    return acc


def append_leaves(
    size: int, frontier: list[bytes], leaves: Sequence[bytes], keep: Callable[[int], bool]
) -> tuple[list[bytes], list[tuple[int, int, bytes]]]:
    """Append to a compact range (the perfect subtrees of the tree, largest first).

    Returns the new compact range and each completed perfect subtree ``(level, index, hash)`` whose
    level ``keep`` accepts (the stored strata). Cost: one node hash per leaf, amortised.
    """
    levels = [bit for bit in range(size.bit_length() - 1, -1, -1) if size >> bit & 1]
    stack = list(zip(levels, frontier, strict=True))
    completed: list[tuple[int, int, bytes]] = []
    position = size
    for leaf in leaves:
        level, h = 0, leaf
        while stack and stack[-1][0] == level:
            _, left = stack.pop()
            h = node_hash(left, h)
            level += 1
            if keep(level):
                completed.append((level, position >> level, h))
        stack.append((level, h))
        position += 1
    return [h for _, h in stack], completed


def inclusion_path(index: int, size: int, subtree: SubtreeHash) -> list[bytes]:
    """PATH(index, D[0:size]) of RFC 6962 §2.1.1, leaf to root."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of size {size}")
    path: list[bytes] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = split_point(hi - lo)
        if index < lo + k:
            path.append(subtree(lo + k, hi))
            hi = lo + k
        else:
            path.append(subtree(lo, lo + k))
            lo += k
    path.reverse()
    return path


def consistency_path(old: int, new: int, subtree: SubtreeHash) -> list[bytes]:
    """PROOF(old, D[0:new]) of RFC 6962 §2.1.2."""
    if not 0 <= old <= new:
        raise ProofError(f"no consistency proof from size {old} to size {new}")
    if old == 0 or old == new:
        return []
    out: list[bytes] = []
    lo, hi, m, whole = 0, new, old, True
    while m != hi - lo:
        k = split_point(hi - lo)
        if m <= k:
            out.append(subtree(lo + k, hi))
            hi = lo + k
        else:
            out.append(subtree(lo, lo + k))
            lo += k
            m -= k
            whole = False
    if not whole:
        out.append(subtree(lo, hi))
    out.reverse()
    return out


def multi_inclusion(indices: Sequence[int], size: int, subtree: SubtreeHash) -> list[bytes]:
    """The hashes needed to rebuild the root from the leaves at ``indices`` (sorted, distinct).

    Left-to-right over the RFC recursion: every maximal subtree holding none of the indices contributes
    its hash once. Each of these is a hash of other leaves only, never their content.
    """
    if any(b <= a for a, b in itertools.pairwise(indices)):
        raise ProofError("indices must be sorted and distinct")
    if indices and not (indices[0] >= 0 and indices[-1] < size):
        raise ProofError(f"an index is outside the tree of size {size}")
    out: list[bytes] = []

    def walk(lo: int, hi: int, first: int, last: int) -> None:  # indices[first:last] lie in [lo, hi)
        if first == last:
            out.append(subtree(lo, hi))
            return
        if hi - lo == 1:
            return
        mid = lo + split_point(hi - lo)
        cut = first
        while cut < last and indices[cut] < mid:
            cut += 1
        walk(lo, mid, first, cut)
        walk(mid, hi, cut, last)

    walk(0, size, 0, len(indices))
    return out


def root_from_inclusion(index: int, size: int, leaf: bytes, path: Sequence[bytes]) -> bytes:
    """RFC 9162 §2.1.3.2: the root that ``path`` implies for ``leaf`` at ``index``."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of size {size}")
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            raise ProofError("inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion proof is too short")
    return r


def verify_inclusion(index: int, size: int, leaf: bytes, path: Sequence[bytes], root: bytes) -> None:
    if not hmac.compare_digest(root_from_inclusion(index, size, leaf, path), root):
        raise ProofError("inclusion proof does not lead to the root")


def verify_consistency(old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> None:
    """RFC 9162 §2.1.4.2."""
    if not 0 <= old <= new:
        raise ProofError(f"size {new} cannot extend size {old}")
    if old == new:
        if proof or not hmac.compare_digest(old_root, new_root):
            raise ProofError("equal sizes need equal roots and an empty proof")
        return
    if old == 0:
        if proof:
            raise ProofError("a proof from the empty tree is empty")
        return
    if not proof:
        raise ProofError("consistency proof is empty")
    path = list(proof)
    if old & (old - 1) == 0:  # old is a power of two: its root is the first node
        path.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("consistency proof is too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0 or not hmac.compare_digest(fr, old_root) or not hmac.compare_digest(sr, new_root):
        raise ProofError("consistency proof does not link the two roots")
