"""The agent CLI's model, registration and spool commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compute_agents.checkpoint import MANIFEST, sha3_file
from compute_agents.cli import main
from compute_agents.spool import Spool
from treemeter_records import make_record


def test_create_model_writes_a_checkpoint_with_its_fingerprints(tmp_path: Path, capsys: Any) -> None:
    directory = tmp_path / "model"
    argv = [
        "create-model",
        str(directory),
        "--hidden",
        "32",
        "--layers",
        "2",
        "--experts",
        "4",
        "--vocab",
        "300",
    ]
    assert main(argv) == 0
    manifest = json.loads((directory / MANIFEST).read_text())
    assert manifest["weights_sha3"] == sha3_file(directory / "model.safetensors")
    assert len(manifest["experts"]) == 2 * 4
    assert manifest["experts"]["1/3"] == sha3_file(directory / "experts" / "L1-E3.safetensors")
    assert f"weights_sha3  {manifest['weights_sha3']}" in capsys.readouterr().out
    assert main(["create-model", str(tmp_path / "bad"), "--experts", "2", "--top-k", "3"]) == 2


def test_the_router_refuses_a_tree_config_naming_the_line(tmp_path: Path, capsys: Any) -> None:
    config = tmp_path / "tree-config.yaml"
    config.write_text(
        "version: 1\nsubtrees:\n  finance:\n    kind: gpu\n    executors: [a]\n"
        "    sla: {p99_ms: 300, max_concurrency: 4}\n"
    )
    key = ["--key-file", str(tmp_path / "router.key")]
    argv = [*key, "router", "--agent-id", "router-1", "--data-dir", str(tmp_path / "router")]
    assert main([*argv, "--tree-config", str(config)]) == 2
    error = capsys.readouterr().err
    assert f"router: {config}:4: subtrees.finance.kind: must be one of inference, training, batch" in error


def test_spool_status_reports_depth_and_next_seq(tmp_path: Path, capsys: Any) -> None:
    assert main(["spool-status", "--data-dir", str(tmp_path)]) == 1
    spool = Spool(tmp_path / "spool.sqlite3")
    for _ in range(3):
        spool.append(
            lambda seq: make_record(
                agent_id="a",
                seq=seq,
                tenant="t",
                contract="c",
                package="p",
                sla_class="standard",
                client_request_id="",
                model_id="m",
                weights_sha3="0" * 64,
                start_ns=1,
                end_ns=2,
                clock_drift_us=0,
                tokens_in=1,
                tokens_out=1,
                hops=[{"layer": "L1", "node": "n", "latency_us": 1}],
                experts=[],
                prefix_cache_hit_tokens=0,
                expert_cache_hits=0,
                expert_cache_misses=0,
                status="ok",
            )
        )
    spool.acknowledge([0])
    assert main(["spool-status", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "depth     2 records" in out and "next_seq  3" in out and "shipped   1" in out


@pytest.mark.django_db(transaction=True)
def test_register_pins_the_platform_key(tmp_path: Path, live_server: Any, capsys: Any) -> None:
    from django.conf import settings

    from treemeter_records import private_key_from_seed, public_key_to_b64

    argv = [
        "--key-file",
        str(tmp_path / "k"),
        "register",
        "--platform-url",
        live_server.url,
        "--agent-id",
        "gpu-9",
    ]
    argv += ["--data-dir", str(tmp_path)]
    assert main(argv) == 0
    expected = public_key_to_b64(private_key_from_seed(settings.PLATFORM_SIGNING_KEY))
    assert (tmp_path / "platform-key.b64").read_text().strip() == expected
    assert "register_agent gpu-9 --public-key" in capsys.readouterr().out
    assert main([*argv[:4], "http://127.0.0.1:9", *argv[5:]]) == 1


def test_logs_are_json_lines(capsys: Any) -> None:
    import structlog

    from compute_agents.logs import configure_logging

    configure_logging()
    try:
        structlog.get_logger("compute_agents.test").warning("ingest_unavailable", failures=3)
    finally:
        structlog.reset_defaults()
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["event"] == "ingest_unavailable" and line["failures"] == 3 and line["level"] == "warning"
    assert line["timestamp"].endswith("Z")
