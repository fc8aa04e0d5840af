"""RFC 6962 / 9162 hashing and proof checks on hashlib."""

from __future__ import annotations

import hmac
import itertools
from bisect import bisect_left
from collections.abc import Sequence
from hashlib import sha256

EMPTY_ROOT = sha256(b"").digest()


class ProofError(ValueError):
    pass


def leaf_hash(data: bytes) -> bytes:
    return sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return sha256(b"\x01" + left + right).digest()


def root_of_leaves(leaves: Sequence[bytes]) -> bytes:
    if not leaves:
        return EMPTY_ROOT
    level = list(leaves)
    while len(level) > 1:
        nxt = [sha256(b"\x01" + level[i] + level[i + 1]).digest() for i in range(0, len(level) - 1, 2)]
        if len(level) & 1:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def _split(n: int) -> int:
    return 1 << ((n - 1).bit_length() - 1)


def root_from_multi_inclusion(
    indices: Sequence[int], leaves: Sequence[bytes], size: int, hashes: Sequence[bytes]
) -> bytes:
    """The root implied by leaves at sorted distinct ``indices`` and the bundle's other-subtree hashes.

    Mirrors the RFC recursion left to right: a subtree with none of the indices takes the next bundle
    hash, a subtree with all of its leaves present is hashed from them directly.
    """
    if any(b <= a for a, b in itertools.pairwise(indices)):
        raise ProofError("log indices must be distinct")
    if indices and not (indices[0] >= 0 and indices[-1] < size):
        raise ProofError(f"a log index lies outside the tree of size {size}")
    supply = iter(hashes)

    def walk(lo: int, hi: int, first: int, last: int) -> bytes:
        if first == last:
            try:
                return next(supply)
            except StopIteration:
                raise ProofError("inclusion bundle is too short") from None
        if last - first == hi - lo:
            return root_of_leaves(leaves[first:last])
        mid = lo + _split(hi - lo)
        cut = bisect_left(indices, mid, first, last)
        return node_hash(walk(lo, mid, first, cut), walk(mid, hi, cut, last))

    if size == 0:
        raise ProofError("an empty tree includes nothing")
    root = walk(0, size, 0, len(indices))
    if next(supply, None) is not None:
        raise ProofError("inclusion bundle is too long")
    return root


def root_from_inclusion(index: int, size: int, leaf: bytes, path: Sequence[bytes]) -> bytes:
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


def verify_consistency(old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> None:
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
    if old & (old - 1) == 0:
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
        raise ProofError("consistency proof does not link the two checkpoints")
