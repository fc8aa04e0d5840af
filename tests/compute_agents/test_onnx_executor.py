"""ONNX capabilities served by the agent (``serve --onnx-config``): tiny models built here with
``onnx.helper``, the executor config the package factory writes, the real agent against a live platform.
Each call's answer is checked against numpy and its record against what was asked; the records are
shipped and stored like any other."""

from __future__ import annotations

import hashlib
import json
import signal
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import structlog
from fastapi.testclient import TestClient
from onnx import TensorProto, helper, numpy_helper

from clickhouse_store import query
from compute_agents.app import create_app
from compute_agents.cli import main
from compute_agents.engine import TorchEngine
from compute_agents.onnx_executor import CapabilityConfigError, OnnxExecutor
from entitlements.services import issue_api_key
from tests.compute_agents.agent_harness import start_agent
from tests.compute_agents.openai_server import records
from tests.compute_agents.publisher import trust
from tests.compute_agents.signed_snapshot import local_agent, snapshot_key
from tests.factories import ContractFactory

WEIGHTS = np.arange(8, dtype=np.float32).reshape(4, 2) / 10
BIAS = np.array([0.5, -1.0], dtype=np.float32)
X = [[1.0, 2.0, 3.0, 4.0], [0.5, -1.5, 2.25, 0.0], [-3.0, 1.0, 0.0, 7.5]]
SLOW_LAYERS = 40  # 40 chained 512×512 matmuls: about 50 ms on one thread, 50 times the slow one's timeout


def tensor(name: str, dtype: int, shape: list[Any]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def model(nodes: list[Any], inputs: list[Any], outputs: list[Any], initializers: list[Any]) -> bytes:
    graph = helper.make_graph(nodes, "capability", inputs, outputs, initializers)
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    built.ir_version = 10  # what onnxruntime 1.31 reads
    return built.SerializeToString()


def linear() -> bytes:
    """y = x @ W + b, x float32 [batch, 4], y float32 [batch, 2]."""
    return model(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        [tensor("x", TensorProto.FLOAT, ["batch", 4])],
        [tensor("y", TensorProto.FLOAT, ["batch", 2])],
        [numpy_helper.from_array(WEIGHTS, "W"), numpy_helper.from_array(BIAS, "b")],
    )


def masked() -> bytes:
    """kept = where(mask, ids, 0): ids int64 and mask bool [batch, 3], kept int64 [batch, 3]."""
    return model(
        [helper.make_node("Where", ["mask", "ids", "zero"], ["kept"])],
        [tensor("ids", TensorProto.INT64, ["batch", 3]), tensor("mask", TensorProto.BOOL, ["batch", 3])],
        [tensor("kept", TensorProto.INT64, ["batch", 3])],
        [numpy_helper.from_array(np.array(0, dtype=np.int64), "zero")],
    )


def slow() -> bytes:
    """A loop-free chain of matmuls, x float32 [batch, 4] → y float32 [batch, 512]."""
    rng = np.random.default_rng(0)
    names = ["h0", *(f"h{i}" for i in range(1, SLOW_LAYERS)), "y"]
    nodes = [helper.make_node("MatMul", ["x", "W0"], ["h0"])] + [
        helper.make_node("MatMul", [names[i], "W"], [names[i + 1]]) for i in range(SLOW_LAYERS)
    ]
    return model(
        nodes,
        [tensor("x", TensorProto.FLOAT, ["batch", 4])],
        [tensor("y", TensorProto.FLOAT, ["batch", 512])],
        [
            numpy_helper.from_array((rng.standard_normal((4, 512)) * 0.01).astype(np.float32), "W0"),
            numpy_helper.from_array((rng.standard_normal((512, 512)) * 0.04).astype(np.float32), "W"),
        ],
    )


def spec(name: str, dtype: str, shape: list[int | None]) -> dict[str, Any]:
    return {"name": name, "dtype": dtype, "shape": shape}


def capability(
    directory: Path,
    code: str,
    package: str,
    data: bytes,
    inputs: list[Any],
    outputs: list[Any],
    timeout_ms: int,
) -> dict[str, Any]:
    """One entry of the executor config, its model file written beside it under models/."""
    path = directory / "models" / f"{code}.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {
        "code": code,
        "model": f"onnx/{code}",
        "package": package,
        "artifact": {"path": f"models/{code}.onnx", "sha256": hashlib.sha256(data).hexdigest()},
        "inputs": inputs,
        "outputs": outputs,
        "timeout_ms": timeout_ms,
    }


def write_config(directory: Path, package: str) -> Path:
    """The package's three capabilities: claim-ocr (linear), masked-ids (int64 and bool), slow-net
    (a 1 ms timeout it cannot meet)."""
    config = directory / "onnx.json"
    directory.mkdir(parents=True, exist_ok=True)
    x, y = spec("x", "float32", [None, 4]), spec("y", "float32", [None, 2])
    entries = [
        capability(directory, "claim-ocr", package, linear(), [x], [y], 500),
        capability(
            directory,
            "masked-ids",
            package,
            masked(),
            [spec("ids", "int64", [None, 3]), spec("mask", "bool", [None, 3])],
            [spec("kept", "int64", [None, 3])],
            500,
        ),
        capability(directory, "slow-net", package, slow(), [x], [spec("y", "float32", [None, 512])], 1),
    ]
    config.write_text(json.dumps({"capabilities": entries}))
    return config


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def invocations(code: str) -> str:
    return f"/v1/capabilities/{code}/invocations"


def not_found(code: str) -> dict[str, Any]:
    return {
        "error": {
            "message": f"The capability `{code}` does not exist or you do not have access to it.",
            "type": "invalid_request_error",
            "param": None,
            "code": "model_not_found",
        }
    }


@pytest.mark.usefixtures("clickhouse")
@pytest.mark.django_db(transaction=True)
def test_capability_calls_are_answered_and_every_outcome_is_metered(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    contract, other = ContractFactory.create(), ContractFactory.create()
    key = issue_api_key(contract_code=contract.code, sla_class="gold").secret
    other_key = issue_api_key(contract_code=other.code).secret  # another package's key
    quota_key = issue_api_key(contract_code=contract.code, quota_tokens=5).secret
    config = write_config(tmp_path / "onnx", contract.package.code)
    harness = start_agent(
        live_server.url, tiny_model, tmp_path / "agent", [contract, other], onnx_config=config
    )
    client = TestClient(create_app(harness.agent.service))

    def call(code: str, body: Any, api_key: str = key) -> Any:
        return client.post(invocations(code), json=body, headers=bearer(api_key))

    served = call("claim-ocr", {"inputs": {"x": X}, "event_id": "claim-17"})
    ids, mask = [[1, 2, 3], [4, 5, 6]], [[True, False, True], [False, False, True]]
    kept = call("masked-ids", {"inputs": {"ids": ids, "mask": mask}})
    bad: dict[str, list[Any]] = {
        "inputs.x": [
            {"inputs": {"x": [[1.0, 2.0, 3.0]]}},  # 3 features, not 4
            {"inputs": {"x": [["a", "b", "c", "d"]]}},
            {"inputs": {"x": [[1.0, 2.0, 3.0, 4.0], [1.0, 2.0]]}},  # ragged
            {"inputs": {"x": [1.0, 2.0, 3.0, 4.0]}},  # rank 1
            {"inputs": {}},
        ],
        "inputs.z": [{"inputs": {"x": X, "z": [1]}}],
        "inputs": [{"inputs": [X]}, None],
        "event_id": [{"inputs": {"x": X}, "event_id": 17}],
        "x": [{"x": X}],
    }
    refused = {param: [call("claim-ocr", body) for body in bodies] for param, bodies in bad.items()}
    refused["inputs.ids"] = [
        call("masked-ids", {"inputs": {"ids": [[1.5, 2, 3]], "mask": [[True] * 3]}}),
        call("masked-ids", {"inputs": {"ids": [[2**63, 0, 0]], "mask": [[True] * 3]}}),  # over int64
    ]
    refused["inputs.mask"] = [call("masked-ids", {"inputs": {"ids": [[1, 2, 3]], "mask": [[1, 0, 1]]}})]
    unknown = call("no-such-capability", {"inputs": {"x": X}})
    foreign = call("claim-ocr", {"inputs": {"x": X}}, other_key)
    timed_out = call("slow-net", {"inputs": {"x": np.ones((256, 4)).tolist()}})
    over_quota = call("claim-ocr", {"inputs": {"x": X}}, quota_key)  # holds 3 in + 3 out > 5
    within_quota = call("claim-ocr", {"inputs": {"x": X[:2]}}, quota_key)  # 2 + 2: charged 4 of 5
    quota_spent = call("claim-ocr", {"inputs": {"x": X[:1]}}, quota_key)  # 1 + 1 > the 1 left

    assert served.status_code == 200, served.text
    answer = served.json()
    assert (answer["capability"], answer["items"]) == ("claim-ocr", 3)
    np.testing.assert_allclose(answer["outputs"]["y"], np.array(X, np.float32) @ WEIGHTS + BIAS, rtol=1e-6)
    assert set(answer) == {"capability", "outputs", "items"} and set(answer["outputs"]) == {"y"}
    assert kept.status_code == 200 and kept.json()["outputs"] == {"kept": [[1, 0, 3], [0, 0, 6]]}
    assert kept.json()["items"] == 2
    for param, answers in refused.items():
        for refusal in answers:
            assert refusal.status_code == 400, (param, refusal.text)
            assert (refusal.json()["error"]["code"], refusal.json()["error"]["param"]) == (
                "invalid_input",
                param,
            )
    assert unknown.status_code == foreign.status_code == 404
    assert unknown.json() == not_found("no-such-capability") and foreign.json() == not_found("claim-ocr")
    assert timed_out.status_code == 504 and timed_out.json()["error"]["code"] == "capability_timeout"
    assert over_quota.status_code == quota_spent.status_code == 429 and within_quota.status_code == 200

    spooled = {r["record_id"]: r for r in records(harness.agent.service)}
    answers = [served, kept, unknown, foreign, timed_out, over_quota, within_quota, quota_spent]
    answers += [refusal for group in refused.values() for refusal in group]
    assert {a.headers["x-request-id"] for a in answers} == set(spooled)  # one record per call
    assert all(a.headers["treemeter-receipt"] for a in answers)

    def record_of(response: Any) -> dict[str, Any]:
        return spooled[response.headers["x-request-id"]]

    ok = record_of(served)
    sha3 = hashlib.sha3_256((tmp_path / "onnx" / "models" / "claim-ocr.onnx").read_bytes()).hexdigest()
    assert (ok["status"], ok["model_id"], ok["weights_sha3"]) == ("ok", "onnx/claim-ocr", sha3)
    assert (ok["tokens_in"], ok["tokens_out"], ok["client_request_id"]) == (3, 3, "claim-17")
    assert (ok["tenant"], ok["package"], ok["sla_class"]) == (
        contract.tenant.code,
        contract.package.code,
        "gold",
    )
    assert [hop["layer"] for hop in ok["hops"]] == ["L1", "L3", "L1"] and ok["hops"][1]["latency_us"] > 0
    assert ok["hops"][1]["node"] == f"{harness.settings.agent_id}.l3" and ok["experts"] == []
    assert (record_of(kept)["model_id"], record_of(kept)["tokens_in"]) == ("onnx/masked-ids", 2)
    for response in [*(r for group in refused.values() for r in group), over_quota, quota_spent]:
        rejected = record_of(response)
        assert (rejected["status"], rejected["tokens_in"], rejected["tokens_out"]) == ("rejected", 0, 0)
        assert [hop["layer"] for hop in rejected["hops"]] == ["L1"]
    assert record_of(over_quota)["model_id"] == "onnx/claim-ocr"
    for response in (unknown, foreign):  # a refusal names no model: nothing tells what exists
        assert (record_of(response)["status"], record_of(response)["model_id"]) == ("rejected", "unknown")
    assert record_of(foreign)["tenant"] == other.tenant.code
    slow_record = record_of(timed_out)
    assert (slow_record["status"], slow_record["model_id"]) == ("timeout", "onnx/slow-net")
    assert (slow_record["tokens_in"], slow_record["tokens_out"]) == (256, 0)
    assert slow_record["hops"][1]["latency_us"] >= 1000
    assert (record_of(within_quota)["status"], record_of(within_quota)["tokens_in"]) == ("ok", 2)

    # Shipped and stored like any record: the platform accepts every one of them.
    assert harness.agent.shipper.drain() == len(spooled)
    stored = query.select_dicts(f"SELECT status, count() AS n FROM {query.RECORDS} GROUP BY status")
    expected = {"ok": 3, "timeout": 1, "rejected": len(spooled) - 4}
    assert {row["status"]: row["n"] for row in stored} == expected


def test_a_key_whose_models_leave_out_the_capabilitys_model_is_refused_as_unknown(
    tiny_model: Path, tmp_path: Path
) -> None:
    """The snapshot's ``models`` (docs/agent.md) applies to capabilities with their model id."""
    config = write_config(tmp_path / "onnx", "claims-pkg")
    keys = [
        snapshot_key("tmk_cap-other", package="claims-pkg", models=["onnx/masked-ids"]),
        snapshot_key("tmk_cap-this", package="claims-pkg", models=["onnx/claim-ocr"]),
        snapshot_key("tmk_cap-any", package="claims-pkg"),
    ]
    engine = TorchEngine(tiny_model, trust=trust(tiny_model), workers=1)
    service = local_agent(engine, tmp_path / "agent", "gpu-c", keys, onnx=OnnxExecutor.from_config(config))
    client = TestClient(create_app(service))
    answers = {
        key: client.post(invocations("claim-ocr"), json={"inputs": {"x": X}}, headers=bearer(key))
        for key in ("tmk_cap-other", "tmk_cap-this", "tmk_cap-any")
    }
    assert answers["tmk_cap-other"].status_code == 404
    assert answers["tmk_cap-other"].json() == not_found("claim-ocr")
    assert answers["tmk_cap-this"].status_code == answers["tmk_cap-any"].status_code == 200
    [refused] = [r for r in records(service) if r["status"] == "rejected"]
    assert refused["model_id"] == "unknown"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["artifact"].update(sha256="0" * 64), "has SHA-256 .* not the configured 0000"),
        (
            lambda c: c["inputs"][0].update(shape=[None, 5]),
            r"the model's inputs x: float32\[null, 4\] differ",
        ),
        (
            lambda c: c["outputs"][0].update(dtype="float64"),
            r"the model's outputs y: float32\[null, 2\] differ",
        ),
        (lambda c: c["inputs"][0].update(name="features"), "the model's inputs x: .* differ"),
        (lambda c: c["inputs"][0].update(dtype="string"), "dtype 'string' is not one of"),
        (lambda c: c["artifact"].update(path="models/missing.onnx"), "cannot read the artifact"),
        (lambda c: c.update(timeout_ms=0), "timeout_ms must be"),
    ],
)
def test_a_config_the_model_does_not_match_is_refused_at_start(
    tmp_path: Path, capsys: Any, change: Any, message: str
) -> None:
    config = write_config(tmp_path / "onnx", "claims-pkg")
    edited = json.loads(config.read_text())
    change(edited["capabilities"][0])
    config.write_text(json.dumps(edited))
    with pytest.raises(CapabilityConfigError, match=message):
        OnnxExecutor.from_config(config)
    # serve refuses it before anything else, with the reason and a non-zero exit.
    argv = ["--key-file", str(tmp_path / "agent.key"), "serve", "--agent-id", "gpu-x"]
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        assert main([*argv, "--data-dir", str(tmp_path / "agent"), "--onnx-config", str(config)]) == 1
    finally:  # serve set up its JSON logs (on this test's captured stderr) and its SIGTERM handler
        structlog.reset_defaults()
        signal.signal(signal.SIGTERM, sigterm)
    error = capsys.readouterr().err
    assert error.startswith(f"onnx config refused: {config}: capabilities[0]")
