"""An independent implementation checks the log: a small Go program (tests/ledger/gotlog) built from the
Go project's own golang.org/x/mod/sumdb/note and tlog, as Debian's golang-golang-x-mod-dev ships them,
opens the platform's signed checkpoints with the published verifier key and checks an inclusion proof
and a consistency proof from the API. If the format drifted from the standard, this fails. Skips, with
its reason, where Go or that package is missing (.ci/run installs both)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from ledger.models import Checkpoint
from ledger.services import publish_checkpoint
from tests.factories import ContractFactory, signing_agent
from tests.ledger.support import member_client, send

GOPATH = Path("/usr/share/gocode")  # where Debian's golang-*-dev packages put their sources
SOURCE = Path(__file__).parent / "gotlog" / "main.go"
GO = shutil.which("go")

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("clickhouse"),
    pytest.mark.skipif(GO is None, reason="Go is not installed (Debian: golang-go)"),
    pytest.mark.skipif(
        not (GOPATH / "src/golang.org/x/mod/sumdb/tlog").is_dir(),
        reason="golang.org/x/mod is not installed (Debian: golang-golang-x-mod-dev)",
    ),
]


@pytest.fixture(scope="module")
def gotlog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = tmp_path_factory.mktemp("gotlog")
    env = {**os.environ, "GOPATH": str(GOPATH), "GO111MODULE": "off", "GOCACHE": str(built / "cache")}
    subprocess.run(
        [str(GO), "build", "-o", str(built / "gotlog"), str(SOURCE)], env=env, check=True, timeout=300
    )
    return built / "gotlog"


def _check(gotlog: Path, case: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(gotlog)], input=json.dumps(case), capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def case(client: Client) -> dict[str, Any]:
    """Two checkpoints (5 and 12 records) and, from the API, what a customer holds: the published
    verifier key, an inclusion proof of its 4th record in the later one, and the consistency proof."""
    contract = ContractFactory.create()
    agent = signing_agent(contract)
    records = [agent.record(contract) for _ in range(12)]
    send(client, agent, records[:5])
    older = publish_checkpoint(Checkpoint.Reason.MANUAL)
    send(client, agent, records[5:])
    latest = publish_checkpoint(Checkpoint.Reason.MANUAL)
    anyone = Client()
    inclusion = member_client(contract, "dora").get(
        f"/v1/ledger/records/{records[3]['record_id']}/inclusion", {"size": latest.size}
    )
    assert inclusion.status_code == 200, inclusion.content
    proof = inclusion.json()
    consistency = anyone.get("/v1/ledger/consistency", {"from": older.size, "to": latest.size}).json()
    return {
        "vkey": anyone.get("/v1/ledger/checkpoint-key").json()["note_verifier_key"],
        "checkpoint": anyone.get("/v1/ledger/checkpoint").content.decode(),
        "old_checkpoint": consistency["from_checkpoint"],
        "leaf_index": proof["leaf_index"],
        "leaf_hash": proof["leaf_hash"],
        "inclusion": proof["proof"],
        "consistency": consistency["proof"],
    }


def test_go_verifies_the_checkpoints_an_inclusion_and_a_consistency_proof(
    gotlog: Path, case: dict[str, Any]
) -> None:
    checked = _check(gotlog, case)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip() == "verified: leaf 3 in checkpoint 12, consistent with checkpoint 5"


def _flipped(text: str) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[0] ^= 1
    return base64.b64encode(bytes(raw)).decode()


@pytest.mark.parametrize(
    ("tamper", "refusal"),
    [
        (lambda c: {**c, "checkpoint": c["checkpoint"].replace("\n12\n", "\n13\n")}, "note:"),
        (lambda c: {**c, "leaf_hash": _flipped(c["leaf_hash"])}, "inclusion:"),
        (lambda c: {**c, "leaf_index": c["leaf_index"] + 1}, "inclusion:"),
        (
            lambda c: {**c, "consistency": [_flipped(c["consistency"][0]), *c["consistency"][1:]]},
            "consistency:",
        ),
        (lambda c: {**c, "vkey": c["vkey"].replace("+", "x+", 1)}, "verifier key:"),
    ],
)
def test_go_refuses_what_was_changed(gotlog: Path, case: dict[str, Any], tamper: Any, refusal: str) -> None:
    checked = _check(gotlog, tamper(case))
    assert checked.returncode == 1 and checked.stdout.startswith(refusal), checked.stdout + checked.stderr
