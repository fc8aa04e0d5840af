"""RFC 6962 Merkle tree hashing against the published test vectors.

Leaf inputs and expected roots are the RFC 6962 reference data published in
transparency-dev/merkle ``testonly/constants.go`` (LeafInputs, NodeHashes, RootHashes) and
``rfc6962/rfc6962_test.go`` (formerly google/certificate-transparency-go testdata).
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from treemeter_records import EMPTY_ROOT, leaf_hash, merkle_root, merkle_root_of, node_hash

LEAF_INPUTS = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
# Level-0 node hashes (leaf hashes) of the inputs above.
LEAF_HASHES = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
    "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
    "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    "4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658",
    "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
    "46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1",
]
# Root hashes of the trees over the first n inputs, n = 0..8.
ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


def test_empty_tree_is_sha256_of_nothing() -> None:
    assert EMPTY_ROOT.hex() == ROOTS[0] == hashlib.sha256(b"").hexdigest()
    assert merkle_root([]) == EMPTY_ROOT


def test_leaf_and_node_hash_vectors() -> None:
    assert [leaf_hash(x).hex() for x in LEAF_INPUTS] == LEAF_HASHES
    assert leaf_hash(b"").hex() == "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    assert leaf_hash(b"L123456").hex() == "395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56"
    assert (
        node_hash(b"N123", b"N456").hex()
        == "aa217fe888e47007fa15edab33c2b492a722cb106c64667fc2b044444de66bbb"
    )


@pytest.mark.parametrize("size", range(9))
def test_rfc6962_roots(size: int) -> None:
    assert merkle_root_of(LEAF_INPUTS[:size]).hex() == ROOTS[size]
    assert merkle_root([leaf_hash(x) for x in LEAF_INPUTS[:size]]).hex() == ROOTS[size]


def _reference_mth(leaves: list[bytes]) -> bytes:
    """RFC 6962 section 2.1, literally: split at the largest power of two smaller than n."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1
    while k * 2 < n:
        k *= 2
    return hashlib.sha256(b"\x01" + _reference_mth(leaves[:k]) + _reference_mth(leaves[k:])).digest()


def test_matches_recursive_definition_for_all_small_sizes() -> None:
    leaves = [i.to_bytes(2, "big") for i in range(130)]
    for n in range(len(leaves) + 1):
        assert merkle_root_of(leaves[:n]) == _reference_mth(leaves[:n]), n


@given(st.lists(st.binary(max_size=8), max_size=300))
def test_matches_recursive_definition(leaves: list[bytes]) -> None:
    assert merkle_root_of(leaves) == _reference_mth(leaves)


def test_order_matters() -> None:
    assert merkle_root_of([b"a", b"b"]) != merkle_root_of([b"b", b"a"])
