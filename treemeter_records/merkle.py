"""RFC 6962 (Certificate Transparency) Merkle tree hashing over SHA-256."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from hashlib import sha256

LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"
EMPTY_ROOT = sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    """SHA-256(0x00 || data); for a record, ``data`` is its canonical bytes."""
    return sha256(LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right)."""
    return sha256(NODE_PREFIX + left + right).digest()


def merkle_root(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH of RFC 6962 section 2.1 over already-hashed leaves (SHA-256 of nothing when empty).

    Computed bottom-up: pair neighbours on each level and carry an odd last node up unchanged.
    This yields exactly the RFC's recursive definition (split at the largest power of two
    smaller than n) without recursion; tests check it against both the published vectors and
    a literal recursive implementation.
    """
    n = len(leaf_hashes)
    if n == 0:
        return EMPTY_ROOT
    level = list(leaf_hashes)
    while n > 1:
        nxt = [sha256(NODE_PREFIX + level[i] + level[i + 1]).digest() for i in range(0, n - 1, 2)]
        if n & 1:
            nxt.append(level[-1])
        level = nxt
        n = len(level)
    return level[0]


def merkle_root_of(entries: Iterable[bytes]) -> bytes:
    """MTH over raw leaf inputs (each is leaf-hashed first)."""
    return merkle_root([sha256(LEAF_PREFIX + e).digest() for e in entries])
