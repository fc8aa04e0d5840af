"""Expert files fingerprinted in 64 KiB blocks: a refused load names the first damaged block, how many are
damaged, and a truncation or extension; a manifest without blocks refuses as it always did."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from compute_agents.checkpoint import (
    MANIFEST,
    ExpertBlocks,
    TinySizes,
    create_tiny_model,
    expert_file,
    read_manifest,
)
from compute_agents.engine import TorchEngine
from compute_agents.expert_cache import ExpertCache, ExpertIntegrityError
from tests.compute_agents.publisher import publish, trust

KIB64 = 65_536  # stated here, not imported: the test checks the manifest against it
WIDE = TinySizes(hidden=512, layers=2, experts=4, moe_intermediate=256, vocab=512)  # ~1.5 MB experts
LAYER, EXPERT = 1, 3


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("wide-moe")
    create_tiny_model(directory, WIDE)
    return publish(directory)


@pytest.fixture
def model(wide_model: Path, tmp_path: Path) -> Path:
    """A copy of the checkpoint that a test may damage."""
    return Path(shutil.copytree(wide_model, tmp_path / "model"))


def cache_for(directory: Path) -> ExpertCache:
    manifest = read_manifest(directory)
    return ExpertCache(
        directory,
        manifest["experts"],
        layers=WIDE.layers,
        capacity=WIDE.experts,
        blocks=ExpertBlocks.from_manifest(manifest),
    )


def flip(path: Path, *offsets: int) -> None:
    data = bytearray(path.read_bytes())
    for offset in offsets:
        data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def refusal(directory: Path) -> ExpertIntegrityError:
    with pytest.raises(ExpertIntegrityError) as caught:
        cache_for(directory).get(LAYER, EXPERT)
    return caught.value


def test_the_manifest_holds_the_sha3_of_each_64_kib_slice(wide_model: Path) -> None:
    manifest = read_manifest(wide_model)
    assert manifest["block_bytes"] == KIB64
    assert manifest["expert_blocks"].keys() == manifest["experts"].keys() == manifest["expert_bytes"].keys()
    for key in manifest["experts"]:
        layer, expert = map(int, key.split("/"))
        data = expert_file(wide_model, layer, expert).read_bytes()
        slices = [data[start : start + KIB64] for start in range(0, len(data), KIB64)]
        assert len(slices) >= 3 and len(slices[-1]) <= KIB64
        assert manifest["expert_blocks"][key] == [hashlib.sha3_256(s).hexdigest() for s in slices]
        assert manifest["expert_bytes"][key] == len(data)
        assert manifest["experts"][key] == hashlib.sha3_256(data).hexdigest()  # the check of record


def test_intact_files_load(wide_model: Path) -> None:
    cache = cache_for(wide_model)
    for layer in range(WIDE.layers):
        for expert in range(WIDE.experts):
            gate_up, down = cache.get(layer, expert)
            assert gate_up.shape == (2 * WIDE.moe_intermediate, WIDE.hidden)
            assert down.shape == (WIDE.hidden, WIDE.moe_intermediate)
    assert cache.stats.misses == WIDE.layers * WIDE.experts


def test_one_flipped_byte_names_its_block_and_byte_range(model: Path) -> None:
    path = expert_file(model, LAYER, EXPERT)
    flip(path, 2 * KIB64 + 1234)
    error = refusal(model)
    assert (error.block, error.byte_range, error.damaged_blocks) == (2, (131072, 196607), 1)
    assert (error.layer, error.expert, error.path, error.resized_from) == (LAYER, EXPERT, path, None)
    message = str(error)
    assert "does not match the manifest" in message
    assert f"{path}:" in message and f"Layer {LAYER}, expert {EXPERT}" in message
    assert "block 2 (bytes 131072–196607), 1 damaged block." in message
    assert "truncated" not in message and "extended" not in message


def test_two_damaged_blocks_are_counted_and_the_first_named(model: Path) -> None:
    flip(expert_file(model, LAYER, EXPERT), 9 * KIB64 + 7, 5 * KIB64)
    error = refusal(model)
    assert (error.block, error.byte_range, error.damaged_blocks) == (5, (5 * KIB64, 6 * KIB64 - 1), 2)
    assert "block 5 (bytes 327680–393215), 2 damaged blocks" in str(error)


def test_a_truncated_file_is_named_truncated_from_its_block(model: Path) -> None:
    path = expert_file(model, LAYER, EXPERT)
    size = path.stat().st_size
    blocks = -(-size // KIB64)
    path.write_bytes(path.read_bytes()[: 3 * KIB64 + 1000])
    error = refusal(model)
    # Block 3 is cut short and every block after it is missing.
    assert (error.block, error.byte_range) == (3, (196608, 262143))
    assert (error.damaged_blocks, error.resized_from) == (blocks - 3, 3)
    assert (
        f"the file is truncated from block 3 on ({3 * KIB64 + 1000} bytes read, {size} in the manifest)"
        in str(error)
    )


def test_an_extended_file_is_named_extended_from_its_last_block(model: Path) -> None:
    path = expert_file(model, LAYER, EXPERT)
    size = path.stat().st_size
    with path.open("ab") as handle:
        handle.write(b"\0" * 10)
    error = refusal(model)
    last = size // KIB64  # the manifest's last block, shorter than 64 KiB: the 10 bytes land in it
    assert size % KIB64 < KIB64 - 10
    assert (error.block, error.damaged_blocks, error.resized_from) == (last, 1, last)
    assert error.byte_range == (last * KIB64, size + 10 - 1)
    assert f"the file is extended from block {last} on" in str(error)


def without_blocks(directory: Path) -> dict[str, Any]:
    """Rewrite the manifest as it was before block fingerprints."""
    manifest = read_manifest(directory)
    for key in ("block_bytes", "expert_blocks", "expert_bytes"):
        del manifest[key]
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    publish(directory)  # the publisher signed the old manifest as it was
    return manifest


def test_a_manifest_without_blocks_still_refuses_damage_naming_no_block(model: Path) -> None:
    manifest = without_blocks(model)
    assert ExpertBlocks.from_manifest(manifest) is None
    path = expert_file(model, LAYER, EXPERT)
    flip(path, 2 * KIB64)
    engine = TorchEngine(model, trust=trust(model), preheat=0)  # an old checkpoint still loads
    assert engine.cache.get(LAYER, 0)  # an intact expert still loads
    with pytest.raises(ExpertIntegrityError) as caught:
        engine.cache.get(LAYER, EXPERT)
    actual = hashlib.sha3_256(path.read_bytes()).hexdigest()
    expected = manifest["experts"][f"{LAYER}/{EXPERT}"]
    assert (
        str(caught.value)
        == f"{path}: SHA3-256 {actual} does not match the manifest ({expected}); load refused."
    )
    assert (caught.value.block, caught.value.byte_range, caught.value.damaged_blocks) == (None, None, None)


def test_the_torch_engine_names_the_damaged_block(model: Path) -> None:
    flip(expert_file(model, LAYER, EXPERT), 4 * KIB64 + 1)
    alerts: list[tuple[int, int, str]] = []
    engine = TorchEngine(model, trust=trust(model), preheat=0, on_integrity_error=lambda *a: alerts.append(a))
    with pytest.raises(ExpertIntegrityError, match="block 4 ") as caught:
        engine.cache.get(LAYER, EXPERT)
    assert caught.value.block == 4
    assert alerts == [(LAYER, EXPERT, str(expert_file(model, LAYER, EXPERT)))]
