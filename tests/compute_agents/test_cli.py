"""The agent CLI against the real ingest API (live server, real PostgreSQL and ClickHouse)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents.services import register_agent
from clickhouse_store import query
from compute_agents.cli import load_or_create_seed, main
from tests.factories import ContractFactory
from treemeter_records import private_key_from_seed, public_key_to_b64


def test_identity_creates_the_key_once(tmp_path: Path, capsys: Any) -> None:
    key_file = tmp_path / "keys" / "agent.key"
    assert main(["--key-file", str(key_file), "identity"]) == 0
    first = capsys.readouterr().out
    assert main(["--key-file", str(key_file)]) == 0
    assert capsys.readouterr().out == first and "key_id      ed25519:" in first
    assert key_file.stat().st_mode & 0o777 == 0o600


@pytest.mark.usefixtures("clickhouse")
@pytest.mark.django_db(transaction=True)
def test_send_synthetic_records_are_accepted_and_stored(
    tmp_path: Path, live_server: Any, capsys: Any
) -> None:
    contract = ContractFactory.create()
    key_file = tmp_path / "agent.key"
    key = private_key_from_seed(load_or_create_seed(key_file))
    register_agent(
        agent_id="gpu-1",
        public_key_b64=public_key_to_b64(key),
        tenant_codes=[],
        contract_codes=[contract.code],
    )
    argv = [
        "--key-file",
        str(key_file),
        "send-synthetic",
        "--platform-url",
        live_server.url,
        "--agent-id",
        "gpu-1",
        "--tenant",
        contract.tenant.code,
        "--contract",
        contract.code,
        "--package",
        contract.package.code,
        "--records",
        "250",
        "--batch-size",
        "100",
    ]
    assert main(argv) == 0
    assert "accepted 250, duplicate 0, rejected 0" in capsys.readouterr().out
    assert query.select(f"SELECT count() FROM {query.RECORDS}")[0][0] == 250


def test_an_unregistered_agent_is_told_and_exits_non_zero(
    tmp_path: Path, live_server: Any, capsys: Any
) -> None:
    argv = [
        "--key-file",
        str(tmp_path / "k"),
        "send-synthetic",
        "--platform-url",
        live_server.url,
        "--agent-id",
        "gpu-x",
        "--tenant",
        "t",
        "--contract",
        "c",
        "--package",
        "p",
        "--records",
        "5",
    ]
    assert main(argv) == 1
    assert "unknown_agent" in capsys.readouterr().err
