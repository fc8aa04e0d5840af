"""The tests' model publisher: one fixed Ed25519 key signs every test checkpoint's manifest, and the
agents under test trust it for the checkpoint's model (compute_agents.manifest_signature)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from compute_agents.checkpoint import read_manifest
from compute_agents.manifest_signature import ManifestTrust, sign_manifest
from treemeter_records import private_key_from_seed, public_key_to_b64

PUBLISHER = private_key_from_seed(hashlib.sha256(b"treemeter tests: the model publisher").digest())
PUBLISHER_B64 = public_key_to_b64(PUBLISHER)


def model_id_of(directory: Path) -> str:
    return str(read_manifest(directory)["model_id"])


def publish(directory: Path) -> Path:
    """Sign the checkpoint's manifest as the tests' publisher; returns the directory."""
    sign_manifest(directory, PUBLISHER)
    return directory


def trust(directory: Path) -> ManifestTrust:
    """What an agent trusts for this checkpoint once the platform registered the tests' publisher."""
    return ManifestTrust.of(model_id_of(directory), PUBLISHER.public_key())
