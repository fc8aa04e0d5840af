"""The log's tree code against the RFC 6962 vectors of transparency-dev/merkle (testonly, proof tests),
shared by every Merkle implementation in tests/merkle_vectors.json."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.merkle import (
    ProofError,
    append_leaves,
    consistency_path,
    fold,
    inclusion_path,
    multi_inclusion,
    perfect_ranges,
    split_point,
    verify_consistency,
    verify_inclusion,
)
from treemeter_records.merkle import EMPTY_ROOT, leaf_hash, merkle_root, node_hash

H = bytes.fromhex
VECTORS = json.loads((Path(__file__).parents[1] / "merkle_vectors.json").read_text())
LEAF_INPUTS = [H(h) for h in VECTORS["leaf_inputs"]]
ROOTS = [H(h) for h in VECTORS["roots"]]
# (leaf index 1-based, tree size, proof) from proof/verify_test.go
INCLUSION = [(v["leaf"], v["size"], v["proof"]) for v in VECTORS["inclusion"]]
CONSISTENCY = [(v["old"], v["new"], v["proof"]) for v in VECTORS["consistency"]]
LEAVES = [leaf_hash(x) for x in LEAF_INPUTS]


def in_memory(leaves: list[bytes]) -> Callable[[int, int], bytes]:
    return lambda lo, hi: merkle_root(leaves[lo:hi])


def rfc_mth(leaves: list[bytes]) -> bytes:
    """The literal recursive definition of RFC 6962 §2.1."""
    if len(leaves) == 1:
        return leaves[0]
    k = split_point(len(leaves))
    return node_hash(rfc_mth(leaves[:k]), rfc_mth(leaves[k:]))


def test_roots_match_the_published_vectors() -> None:
    assert (
        merkle_root([]) == EMPTY_ROOT == H("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    )
    assert [merkle_root(LEAVES[:n]) for n in range(1, 9)] == ROOTS


@pytest.mark.parametrize(("leaf", "size", "proof"), INCLUSION)
def test_inclusion_paths_match_the_published_vectors(leaf: int, size: int, proof: list[str]) -> None:
    path = inclusion_path(leaf - 1, size, in_memory(LEAVES[:size]))
    assert path == [H(p) for p in proof]
    verify_inclusion(leaf - 1, size, LEAVES[leaf - 1], path, ROOTS[size - 1])


@pytest.mark.parametrize(("old", "new", "proof"), CONSISTENCY)
def test_consistency_paths_match_the_published_vectors(old: int, new: int, proof: list[str]) -> None:
    path = consistency_path(old, new, in_memory(LEAVES[:new]))
    assert path == [H(p) for p in proof]
    verify_consistency(old, new, ROOTS[old - 1], ROOTS[new - 1], path)


@pytest.mark.parametrize(("leaf", "size", "proof"), INCLUSION)
def test_corrupted_inclusion_proofs_fail(leaf: int, size: int, proof: list[str]) -> None:
    path, root, good = [H(p) for p in proof], ROOTS[size - 1], LEAVES[leaf - 1]
    probes = [
        (leaf, size, good, path, root),  # wrong index (leaf is 1-based here)
        (leaf - 1, size * 2, good, path, root),
        (leaf - 1, size, leaf_hash(b"other"), path, root),
        (leaf - 1, size, good, path, EMPTY_ROOT),
        (leaf - 1, size, good, [*path, root], root),
        (leaf - 1, size, good, [root, *path], root),
        (leaf - 1, size, good, path[:-1], root),
        *[
            (
                leaf - 1,
                size,
                good,
                [p if j != i else bytes([p[0] ^ 8]) + p[1:] for j, p in enumerate(path)],
                root,
            )
            for i in range(len(path))
        ],
    ]
    for index, n, leaf_h, bad, r in probes:
        if index >= n:
            continue
        with pytest.raises(ProofError):
            verify_inclusion(index, n, leaf_h, bad, r)


@pytest.mark.parametrize(("old", "new", "proof"), CONSISTENCY)
def test_corrupted_consistency_proofs_fail(old: int, new: int, proof: list[str]) -> None:
    path, r1, r2 = [H(p) for p in proof], ROOTS[old - 1], ROOTS[new - 1]
    probes = [
        (old + 1, new, r1, r2, path),
        (old, new, r2, r1, path),
        (old, new, r1, r2, []),
        (old, new, r1, r2, [*path, r2]),
        (old, new, r1, r2, [r1, *path]),
        (old, new, r1, r2, path[:-1]),
        *[
            (old, new, r1, r2, [p if j != i else bytes([p[0] ^ 16]) + p[1:] for j, p in enumerate(path)])
            for i in range(len(path))
        ],
    ]
    for a, b, x, y, bad in probes:
        if a > b:
            continue
        with pytest.raises(ProofError):
            verify_consistency(a, b, x, y, bad)


def test_appending_keeps_the_compact_range_of_the_vectors() -> None:
    frontier: list[bytes] = []
    stored: list[tuple[int, int, bytes]] = []
    for size, leaf in enumerate(LEAVES):
        frontier, done = append_leaves(size, frontier, [leaf], keep=lambda level: level >= 1)
        stored += done
        assert fold(frontier) == ROOTS[size]
    assert stored == [
        (1, 0, H("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")),
        (1, 1, H("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e")),
        (2, 0, H("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7")),
        (1, 2, H("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a")),
        (1, 3, H("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0")),
        (2, 1, H("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4")),
        (3, 0, H("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328")),
    ]


@given(st.integers(min_value=1, max_value=70), st.data())
def test_every_path_verifies_and_matches_the_recursive_definition(size: int, data: st.DataObject) -> None:
    leaves = [leaf_hash(i.to_bytes(4, "big")) for i in range(size)]
    root = rfc_mth(leaves)
    cut = data.draw(st.integers(min_value=0, max_value=size))
    frontier, _ = append_leaves(0, [], leaves[:cut], keep=lambda level: False)
    frontier, _ = append_leaves(cut, frontier, leaves[cut:], keep=lambda level: False)
    assert fold(frontier) == root == merkle_root(leaves)
    index = data.draw(st.integers(min_value=0, max_value=size - 1))
    verify_inclusion(index, size, leaves[index], inclusion_path(index, size, in_memory(leaves)), root)
    old = data.draw(st.integers(min_value=1, max_value=size))
    proof = consistency_path(old, size, in_memory(leaves))
    verify_consistency(old, size, rfc_mth(leaves[:old]), root, proof)
    assert fold([merkle_root(leaves[i << lv : (i + 1) << lv]) for lv, i in perfect_ranges(0, size)]) == root


def test_multi_inclusion_reveals_one_hash_per_untouched_subtree() -> None:
    leaves = LEAVES
    # leaves 1 and 6 of 8: siblings 0, 7, the pair (2,3) and the leaf 4/5 pair's... exactly these subtrees:
    proof = multi_inclusion([1, 6], 8, in_memory(leaves))
    assert proof == [leaves[0], merkle_root(leaves[2:4]), merkle_root(leaves[4:6]), leaves[7]]
    assert multi_inclusion(list(range(8)), 8, in_memory(leaves)) == []
    assert multi_inclusion([], 8, in_memory(leaves)) == [ROOTS[7]]
    for bad in ([3, 3], [5, 2], [8]):
        with pytest.raises(ProofError):
            multi_inclusion(bad, 8, in_memory(leaves))


def test_sizes_that_cannot_have_proofs_are_refused() -> None:
    for index, size in itertools.product((0, 3), (0, 3)):
        if index >= size:
            with pytest.raises(ProofError):
                inclusion_path(index, size, in_memory(LEAVES))
    with pytest.raises(ProofError):
        consistency_path(5, 4, in_memory(LEAVES))
    with pytest.raises(ProofError):
        verify_consistency(5, 4, ROOTS[4], ROOTS[3], [])
    verify_consistency(0, 5, EMPTY_ROOT, ROOTS[4], [])
    verify_consistency(4, 4, ROOTS[3], ROOTS[3], [])
