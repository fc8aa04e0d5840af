"""Signed checkpoint manifests: nothing of a checkpoint is loaded unless its publisher signed it.

The model publisher signs the manifest (``treemeter.json``: the weights' and every expert file's SHA3-256)
with an Ed25519 key; platform staff register that public key for the model id; agents receive the
registered keys inside the platform-signed entitlement snapshot (``model_keys``). So editing the weights
and the manifest together no longer passes: the edited manifest's signature does not verify.

The signature lies beside the manifest, in ``treemeter.json.sig``::

    {"key_id": "ed25519:<16 hex>", "sig": "<base64 Ed25519 signature>"}

over ``MANIFEST_DOMAIN + the manifest file's bytes``. The bytes signed are the bytes as written, so no
canonical form is needed, and the bytes checked are the very bytes then parsed.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from treemeter_records import key_id_for, public_key_from_b64
from treemeter_records.protocol import MANIFEST_REFUSAL_REASONS

from .checkpoint import MANIFEST, CheckpointError

MANIFEST_DOMAIN = b"treemeter-model-manifest-v1\n"
SIGNATURE_FILE = MANIFEST + ".sig"


class ManifestRefused(CheckpointError):
    """The manifest is not signed by a key the platform registered for its model: nothing is loaded."""

    def __init__(self, directory: Path, model_id: str, reason: str, key_id: str, detail: str) -> None:
        assert reason in MANIFEST_REFUSAL_REASONS, reason
        super().__init__(f"{directory / MANIFEST}: {detail}; refusing to load model {model_id!r}.")
        self.model_id, self.reason, self.key_id = model_id, reason, key_id


@dataclass(frozen=True)
class ManifestTrust:
    """The publisher keys registered for each model id: model id → key id → public key."""

    keys: Mapping[str, Mapping[str, Ed25519PublicKey]] = field(default_factory=dict)

    @classmethod
    def from_entries(cls, entries: Iterable[Mapping[str, Any]]) -> ManifestTrust:
        """From the snapshot's ``model_keys``: ``[{"model_id", "public_key"}]`` (base64 raw keys)."""
        keys: dict[str, dict[str, Ed25519PublicKey]] = {}
        for entry in entries:
            public_key = public_key_from_b64(str(entry["public_key"]))
            keys.setdefault(str(entry["model_id"]), {})[key_id_for(public_key)] = public_key
        return cls(keys)

    @classmethod
    def of(cls, model_id: str, *public_keys: Ed25519PublicKey) -> ManifestTrust:
        return cls({model_id: {key_id_for(key): key for key in public_keys}})


def sign_manifest(directory: Path, key: Ed25519PrivateKey) -> str:
    """Sign the checkpoint's manifest as written, beside it; returns the key id."""
    signature = key.sign(MANIFEST_DOMAIN + (directory / MANIFEST).read_bytes())
    envelope = {"key_id": key_id_for(key), "sig": base64.b64encode(signature).decode("ascii")}
    (directory / SIGNATURE_FILE).write_text(json.dumps(envelope, sort_keys=True) + "\n")
    return envelope["key_id"]


def _envelope(directory: Path, model_id: str) -> tuple[str, bytes]:
    path = directory / SIGNATURE_FILE
    if not path.is_file():
        raise ManifestRefused(
            directory, model_id, "unsigned", "", f"no publisher signature ({SIGNATURE_FILE})"
        )
    try:
        envelope = json.loads(path.read_bytes())
        key_id, signature = envelope["key_id"], base64.b64decode(envelope["sig"], validate=True)
        if not isinstance(key_id, str) or len(signature) != 64:
            raise ValueError("a key id and a 64-byte signature")
    except (ValueError, KeyError, TypeError, binascii.Error) as error:
        raise ManifestRefused(
            directory, model_id, "malformed_signature", "", f"{SIGNATURE_FILE} is malformed ({error})"
        ) from None
    return key_id, signature


def signed_manifest(directory: Path, trust: ManifestTrust) -> dict[str, Any]:
    """The manifest, parsed from the bytes whose signature verified with a key registered for its model
    id; raises ``ManifestRefused`` (or ``CheckpointError`` when there is no manifest) otherwise."""
    path = directory / MANIFEST
    if not path.is_file():
        raise CheckpointError(f"{directory} is not a treemeter checkpoint (no {MANIFEST}).")
    data = path.read_bytes()
    try:
        manifest: dict[str, Any] = json.loads(data)
        model_id = str(manifest["model_id"])
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{path} is not a manifest ({error}).") from None
    key_id, signature = _envelope(directory, model_id)
    public_key = trust.keys.get(model_id, {}).get(key_id)
    if public_key is None:
        raise ManifestRefused(
            directory,
            model_id,
            "unknown_key",
            key_id,
            f"signed by {key_id}, not a key registered for the model",
        )
    try:
        public_key.verify(signature, MANIFEST_DOMAIN + data)
    except InvalidSignature:
        raise ManifestRefused(
            directory, model_id, "bad_signature", key_id, f"the signature by {key_id} does not verify"
        ) from None
    return manifest
