"""Signed expert manifests (issue 21.6): the model publisher signs ``treemeter.json``, the platform
registers the publisher's key for the model id, and an agent refuses, before it loads anything, a manifest
whose signature is missing, malformed, by an unregistered key, or does not verify. A refusing agent tells
the platform, which stores and counts it."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.contrib.auth import get_user_model
from prometheus_client import REGISTRY
from rest_framework.test import APIClient

from agents.models import ManifestRefusal, ModelPublisherKey
from agents.services import register_agent
from compute_agents.checkpoint import MANIFEST, WEIGHTS_FILE, CheckpointError, read_manifest
from compute_agents.engine import TorchEngine
from compute_agents.manifest_signature import SIGNATURE_FILE, ManifestRefused, ManifestTrust, sign_manifest
from compute_agents.runtime import pin_platform_key
from entitlements.selectors import entitlement_snapshot
from tests.compute_agents.agent_harness import register_publisher
from tests.compute_agents.publisher import PUBLISHER, PUBLISHER_B64, model_id_of, trust
from tests.factories import ContractFactory
from treemeter_records import key_id_for, private_key_from_seed, public_key_to_b64

ATTACKER = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"not the publisher").digest())


@pytest.fixture
def model(tiny_model: Path, tmp_path: Path) -> Path:
    """A copy of the signed test checkpoint that a test may tamper with."""
    return Path(shutil.copytree(tiny_model, tmp_path / "model"))


def edit_weights_and_manifest(directory: Path) -> None:
    """The attack a bare manifest let through: new weights, and the manifest rewritten to match them.
    The new weights are not even a safetensors file, so any attempt to load them would fail otherwise."""
    (directory / WEIGHTS_FILE).write_bytes(b"\x00" * 64)
    manifest = read_manifest(directory)
    manifest["weights_sha3"] = hashlib.sha3_256(b"\x00" * 64).hexdigest()
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))


def resign_as_attacker(directory: Path) -> None:
    edit_weights_and_manifest(directory)
    sign_manifest(directory, ATTACKER)


def drop_signature(directory: Path) -> None:
    (directory / SIGNATURE_FILE).unlink()


def garble_signature(directory: Path) -> None:
    (directory / SIGNATURE_FILE).write_text('{"key_id": "ed25519:0000000000000000", "sig": "not base64!"}')


def flip_one_signature_bit(directory: Path) -> None:
    envelope = json.loads((directory / SIGNATURE_FILE).read_text())
    raw = bytearray(base64.b64decode(envelope["sig"]))
    raw[0] ^= 1
    envelope["sig"] = base64.b64encode(bytes(raw)).decode()
    (directory / SIGNATURE_FILE).write_text(json.dumps(envelope))


TAMPERINGS: dict[str, tuple[Callable[[Path], None], str, str]] = {
    # name: (what is done to the checkpoint, the refusal's reason, the key id it names)
    "weights and manifest edited together": (
        edit_weights_and_manifest,
        "bad_signature",
        key_id_for(PUBLISHER),
    ),
    "re-signed by another key": (resign_as_attacker, "unknown_key", key_id_for(ATTACKER)),
    "signature removed": (drop_signature, "unsigned", ""),
    "signature file malformed": (garble_signature, "malformed_signature", ""),
    "one bit of the signature flipped": (flip_one_signature_bit, "bad_signature", key_id_for(PUBLISHER)),
}


def test_a_signed_checkpoint_loads_and_serves(model: Path) -> None:
    engine = TorchEngine(model, trust=trust(model), preheat=0)
    assert engine.model_id == model_id_of(model)
    assert engine.weights_sha3 == read_manifest(model)["weights_sha3"]
    envelope = json.loads((model / SIGNATURE_FILE).read_text())
    assert envelope["key_id"] == key_id_for(PUBLISHER)
    assert len(base64.b64decode(envelope["sig"])) == 64


@pytest.mark.parametrize("name", list(TAMPERINGS))
def test_the_engine_refuses_a_manifest_before_it_loads_anything(model: Path, name: str) -> None:
    tamper, reason, key_id = TAMPERINGS[name]
    tamper(model)
    with pytest.raises(ManifestRefused) as refused:
        TorchEngine(model, trust=trust(model), preheat=0)
    assert (refused.value.reason, refused.value.key_id) == (reason, key_id)
    assert refused.value.model_id == model_id_of(model)
    assert f"refusing to load model {model_id_of(model)!r}" in str(refused.value)


def test_a_key_registered_for_another_model_does_not_count(model: Path) -> None:
    other_model = ManifestTrust.of("another-model", PUBLISHER.public_key())
    with pytest.raises(ManifestRefused) as refused:
        TorchEngine(model, trust=other_model, preheat=0)
    assert refused.value.reason == "unknown_key"
    with pytest.raises(ManifestRefused, match="not a key registered for the model"):
        TorchEngine(model, trust=ManifestTrust(), preheat=0)


def test_a_directory_without_a_manifest_is_not_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="is not a treemeter checkpoint"):
        TorchEngine(tmp_path, trust=ManifestTrust(), preheat=0)


@pytest.mark.django_db
def test_the_snapshot_carries_the_model_keys_in_force() -> None:
    contract = ContractFactory.create()
    agent_key = register_agent(
        agent_id="gpu-keys",
        public_key_b64=public_key_to_b64(private_key_from_seed(os.urandom(32))),
        tenant_codes=[],
        contract_codes=[contract.code],
    )
    client = APIClient()
    staff = get_user_model().objects.create_user("staff-keys", is_staff=True)
    client.force_authenticate(staff)
    body = {"model_id": "tiny-model", "public_key": PUBLISHER_B64}
    first = client.post("/v1/models/publisher-keys", body, format="json")
    again = client.post("/v1/models/publisher-keys", body, format="json")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["key_id"] == again.json()["key_id"] == key_id_for(PUBLISHER)
    bad = client.post(
        "/v1/models/publisher-keys", {"model_id": "tiny-model", "public_key": "AAAA"}, format="json"
    )
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_public_key")
    client.force_authenticate(get_user_model().objects.create_user("not-staff"))
    assert client.post("/v1/models/publisher-keys", body, format="json").status_code == 403
    assert client.get("/v1/models/manifest-refusals").status_code == 403

    entries = entitlement_snapshot(agent_key)["model_keys"]
    assert entries == [
        {"model_id": "tiny-model", "key_id": key_id_for(PUBLISHER), "public_key": PUBLISHER_B64}
    ]
    assert ManifestTrust.from_entries(entries).keys["tiny-model"].keys() == {key_id_for(PUBLISHER)}
    ModelPublisherKey.objects.update(revoked_at="2026-12-07T00:00:00Z")
    assert entitlement_snapshot(agent_key)["model_keys"] == []


def _refusals(reason: str) -> float:
    return REGISTRY.get_sample_value("treemeter_manifest_refusals_total", {"reason": reason}) or 0.0


@pytest.mark.usefixtures("clickhouse")
@pytest.mark.django_db(transaction=True)
def test_an_agent_refuses_an_edited_checkpoint_and_the_platform_counts_it(
    model: Path, tmp_path: Path, live_server: Any
) -> None:
    """The agent process, as deployed: it exits 3 without serving, and staff see the refusal."""
    contract = ContractFactory.create()
    seed = os.urandom(32)
    data_dir = tmp_path / "agent"
    data_dir.mkdir()
    (data_dir / "agent.key").write_bytes(seed)
    register_agent(
        agent_id="gpu-refuses",
        public_key_b64=public_key_to_b64(private_key_from_seed(seed)),
        tenant_codes=[],
        contract_codes=[contract.code],
    )
    register_publisher(model)
    pin_platform_key(live_server.url, data_dir)
    edit_weights_and_manifest(model)
    manifest_sha3 = hashlib.sha3_256((model / MANIFEST).read_bytes()).hexdigest()
    before = _refusals("bad_signature")
    command = [sys.executable, "-m", "compute_agents", "--key-file", str(data_dir / "agent.key"), "serve"]
    command += ["--platform-url", live_server.url, "--agent-id", "gpu-refuses", "--data-dir", str(data_dir)]
    command += ["--model-dir", str(model), "--port", "0", "--threads", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert "manifest refused (bad_signature)" in done.stderr
    assert "could not be reported" not in done.stderr

    refusal = ManifestRefusal.objects.get()
    assert (refusal.agent.agent_id, refusal.model_id, refusal.reason, refusal.key_id) == (
        "gpu-refuses",
        model_id_of(model),
        "bad_signature",
        key_id_for(PUBLISHER),
    )
    assert refusal.manifest_sha3 == manifest_sha3
    assert _refusals("bad_signature") == before + 1
    client = APIClient()
    client.force_authenticate(get_user_model().objects.create_user("staff-sees", is_staff=True))
    listed = client.get("/v1/models/manifest-refusals").json()["results"]
    assert [(r["agent_id"], r["reason"], r["manifest_sha3"]) for r in listed] == [
        ("gpu-refuses", "bad_signature", manifest_sha3)
    ]
