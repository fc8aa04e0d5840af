"""The package factory, timed from the upload to the first billed sandbox request, on real services.

    make bench-factory [ARGS="--runs 3"]

Each run: a new tenant uploads a tiny ONNX model with a declaration over the insurance template
(`POST /v1/factory/packages`), opens a sandbox on the package it gets (`POST /v1/sandbox`) and makes a
sandbox key (`POST /v1/sandbox/keys`), fetches the model by digest and writes the executor
configuration the factory wrote, starts a real agent process on it (`compute_agents serve
--onnx-config`), calls the capability until it answers, waits until the record is stored in the
sandbox's ClickHouse table, and reads the sandbox's projected invoice (`GET /v1/sandbox/projection`):
billed when its requests line counts it. Every phase is printed; the total is "upload → first billed
sandbox request". The platform is this process's WSGI server on a fresh PostgreSQL database and chDB
directory (tools.testenv); the agent is its own process.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import httpx
import numpy as np
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
sys.path[0:1] = [str(ROOT), str(ROOT / "platform"), str(ROOT / "bench")]
from benchdb import use_fresh_database  # noqa: E402

PHASES = (
    "built",
    "sandbox opened and keyed",
    "deployed (model fetched, config written)",
    "first answer (agent process started)",
    "record stored",
    "billed (the sandbox's projected invoice)",
)


def onnx_model(run: int) -> bytes:
    """y = x @ W + b, x float32 [batch, 4]; the graph name makes each run's file its own."""
    weights = np.arange(8, dtype=np.float32).reshape(4, 2) / 10
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        f"bench-{run}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        [numpy_helper.from_array(weights, "W"), numpy_helper.from_array(np.zeros(2, np.float32), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model.SerializeToString()


def until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def one_run(run: int, scratch: Path, platform_url: str, token: str, moe: Path) -> list[float]:
    from agents.services import register_agent
    from clickhouse_store import query
    from compute_agents.runtime import pin_platform_key
    from demo.services import read_or_create_seed
    from demo.tree import agent_command, free_port
    from treemeter_records import private_key_from_seed, public_key_to_b64

    api = httpx.Client(base_url=platform_url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    code = f"claims-{run}"
    declaration = {
        "package": {"code": code, "name": f"Claims {run}"},
        "capability": {
            "code": f"{code}-ocr",
            "inputs": [{"name": "x", "dtype": "float32", "shape": [None, 4]}],
            "outputs": [{"name": "y", "dtype": "float32", "shape": [None, 2]}],
        },
        "host_class": "bench-cpu",
    }
    marks = [time.perf_counter()]
    built = api.post(
        "/v1/factory/packages",
        files={"model": ("model.onnx", onnx_model(run), "application/octet-stream")},
        data={"declaration": json.dumps(declaration), "template": "insurance-claim-documents"},
    )
    built.raise_for_status()
    build = built.json()
    marks.append(time.perf_counter())
    opened = api.post("/v1/sandbox", json={"packages": [code], "daily_events": 0})
    opened.raise_for_status()
    contract_code = opened.json()["contract"]
    key = api.post("/v1/sandbox/keys", json={"package": code})
    key.raise_for_status()
    marks.append(time.perf_counter())

    directory = scratch / code
    directory.mkdir()
    artifact = api.get(f"/v1/factory/artifacts/{build['artifact_sha256']}")
    artifact.raise_for_status()
    (directory / "model.onnx").write_bytes(artifact.content)
    config = build["executor_config"]
    config["capabilities"][0]["artifact"]["path"] = "model.onnx"
    (directory / "onnx.json").write_text(json.dumps(config))
    agent_id = f"executor-{code}"
    seed = read_or_create_seed(directory / "agent.key")
    register_agent(  # the operator registers the executor, as `manage.py register_agent` does
        agent_id=agent_id,
        public_key_b64=public_key_to_b64(private_key_from_seed(seed)),
        tenant_codes=[],
        contract_codes=[contract_code],
    )
    pin_platform_key(platform_url, directory)
    marks.append(time.perf_counter())

    port = free_port("127.0.0.1")
    command = agent_command(
        directory,
        *("serve", "--platform-url", platform_url, "--agent-id", agent_id, "--data-dir", str(directory)),
        *("--model-dir", str(moe), "--port", str(port), "--threads", "1"),
        *("--onnx-config", str(directory / "onnx.json"), "--batch-size", "1", "--batch-age", "0.1"),
    )
    agent = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        caller = httpx.Client(headers={"Authorization": f"Bearer {key.json()['api_key']}"}, timeout=10)
        url = f"http://127.0.0.1:{port}/v1/capabilities/{code}-ocr/invocations"

        def answered() -> bool:
            try:
                return caller.post(url, json={"inputs": {"x": [[1.0, 2.0, 3.0, 4.0]]}}).status_code == 200
            except httpx.TransportError:
                return False

        until(answered, 300, "the agent's first answer")
        marks.append(time.perf_counter())
        stored = f"SELECT count() AS n FROM {query.SANDBOX} WHERE contract = {{c:String}} AND status = 'ok'"
        until(lambda: query.select_dicts(stored, {"c": contract_code})[0]["n"] >= 1, 60, "the record")
        marks.append(time.perf_counter())
        projection = api.get("/v1/sandbox/projection")
        projection.raise_for_status()
        line = next(x for x in projection.json()["lines"] if x["dimension"] == "requests")
        if Decimal(line["quantity"]) <= 0 or Decimal(line["amount"]) <= 0:
            raise SystemExit(f"not billed: {line}")
        marks.append(time.perf_counter())
    finally:
        agent.terminate()
        agent.wait(30)
    return [later - earlier for earlier, later in itertools.pairwise(marks)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    use_fresh_database("treemeter_bench_factory")

    from django.contrib.auth.models import User

    from accounts.access import Principal
    from accounts.models import Membership, Role, Tenant
    from accounts.services import issue_api_token
    from catalog.models import HostCostProfile
    from clickhouse_store.migrator import apply_migrations
    from demo.server import start_api_server
    from demo.tree import model_dir

    apply_migrations()
    HostCostProfile.objects.create(
        host_class="bench-cpu",
        currency="CNY",
        depreciation_per_hour=Decimal(2),
        power_per_hour=Decimal("0.5"),
        operations_per_hour=Decimal(1),
    )

    def owner_token(run: int) -> str:
        """A new tenant's owner token: each run opens the tenant's one sandbox."""
        tenant = Tenant.objects.create(code=f"bench-insurer-{run}", name=f"Bench insurer {run}")
        owner = User.objects.create_user(f"bench-owner-{run}")
        Membership.objects.create(user=owner, tenant=tenant, role=Role.OWNER)
        principal = Principal(tenant, Role.OWNER, owner.pk)
        return issue_api_token(principal, role=Role.OWNER, name="bench").secret

    server, platform_url = start_api_server("127.0.0.1", 0)
    runs: list[list[float]] = []
    with tempfile.TemporaryDirectory() as scratch:
        moe = model_dir(Path(scratch))  # the agent also loads its MoE checkpoint: the tiny one
        for run in range(args.runs):
            runs.append(one_run(run, Path(scratch), platform_url, owner_token(run), moe))
            print(f"run {run + 1}: upload → first billed sandbox request {sum(runs[-1]):.2f} s")
    server.shutdown()
    print(f"\npackage factory, upload → first billed sandbox request, median of {args.runs} runs (seconds):")
    for index, phase in enumerate(PHASES):
        print(f"  {phase:<42} {statistics.median(r[index] for r in runs):8.3f}")
    print(f"  {'total':<42} {statistics.median(sum(r) for r in runs):8.3f}")


if __name__ == "__main__":
    main()
