"""One set of RFC 6962 vectors (tests/merkle_vectors.json) pins every Merkle implementation here to the
same roots and proofs: the records format's hashing (treemeter_records.merkle, used by ingest and the
log), the log's proofs (ledger.merkle) and the standalone verifier's own copy (treemeter_verify.merkle,
kept apart on purpose: it depends on nothing of the platform)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import treemeter_verify.merkle as verifier
from ledger import merkle as log
from treemeter_records import merkle as records

H = bytes.fromhex
VECTORS: dict[str, Any] = json.loads((Path(__file__).parent / "merkle_vectors.json").read_text())
INPUTS = [H(h) for h in VECTORS["leaf_inputs"]]
ROOTS = [H(h) for h in VECTORS["roots"]]


def _subtree(leaves: list[bytes]) -> log.SubtreeHash:
    return lambda lo, hi: records.merkle_root(leaves[lo:hi])


def test_leaf_and_node_hashes_agree() -> None:
    for data in INPUTS:
        assert records.leaf_hash(data) == verifier.leaf_hash(data)
    a, b = records.leaf_hash(INPUTS[0]), records.leaf_hash(INPUTS[1])
    assert records.node_hash(a, b) == verifier.node_hash(a, b)
    assert records.EMPTY_ROOT == verifier.EMPTY_ROOT == records.merkle_root([])


@pytest.mark.parametrize("size", range(1, len(ROOTS) + 1))
def test_every_implementation_gives_the_pinned_roots(size: int) -> None:
    leaves = [records.leaf_hash(x) for x in INPUTS[:size]]
    assert records.merkle_root(leaves) == ROOTS[size - 1]
    assert records.merkle_root_of(INPUTS[:size]) == ROOTS[size - 1]
    assert verifier.root_of_leaves(leaves) == ROOTS[size - 1]
    frontier, _ = log.append_leaves(0, [], leaves, keep=lambda level: False)
    assert log.fold(frontier) == ROOTS[size - 1]


@pytest.mark.parametrize("vector", VECTORS["inclusion"], ids=lambda v: f"{v['leaf']}of{v['size']}")
def test_inclusion_proofs_are_made_and_checked_alike(vector: dict[str, Any]) -> None:
    index, size, proof = vector["leaf"] - 1, vector["size"], [H(p) for p in vector["proof"]]
    leaves = [records.leaf_hash(x) for x in INPUTS[:size]]
    assert log.inclusion_path(index, size, _subtree(leaves)) == proof
    assert log.root_from_inclusion(index, size, leaves[index], proof) == ROOTS[size - 1]
    assert verifier.root_from_inclusion(index, size, leaves[index], proof) == ROOTS[size - 1]


@pytest.mark.parametrize("vector", VECTORS["consistency"], ids=lambda v: f"{v['old']}to{v['new']}")
def test_consistency_proofs_are_made_and_checked_alike(vector: dict[str, Any]) -> None:
    old, new, proof = vector["old"], vector["new"], [H(p) for p in vector["proof"]]
    leaves = [records.leaf_hash(x) for x in INPUTS[:new]]
    assert log.consistency_path(old, new, _subtree(leaves)) == proof
    log.verify_consistency(old, new, ROOTS[old - 1], ROOTS[new - 1], proof)
    verifier.verify_consistency(old, new, ROOTS[old - 1], ROOTS[new - 1], proof)
    with pytest.raises(verifier.ProofError):
        verifier.verify_consistency(old, new, ROOTS[old - 1], ROOTS[new - 2], proof)
    with pytest.raises(log.ProofError):
        log.verify_consistency(old, new, ROOTS[old - 1], ROOTS[new - 2], proof)


@pytest.mark.parametrize(
    "vector", VECTORS["multi_inclusion"], ids=lambda v: f"{v['indices']}of{v['size']}".replace(" ", "")
)
def test_multi_inclusion_bundles_are_made_and_checked_alike(vector: dict[str, Any]) -> None:
    indices, size, bundle = vector["indices"], vector["size"], [H(h) for h in vector["hashes"]]
    leaves = [records.leaf_hash(x) for x in INPUTS[:size]]
    assert log.multi_inclusion(indices, size, _subtree(leaves)) == bundle
    root = verifier.root_from_multi_inclusion(indices, [leaves[i] for i in indices], size, bundle)
    assert root == ROOTS[size - 1]
