"""A gray release where requests are admitted, on the real agent (tests/compute_agents/agent_harness.py):
the signed snapshot carries the stage in force; the agent refuses a capability the stage does not turn
on (403) and a call above its hourly cap (429), each with a `rejected` record, and counts per contract
package and UTC hour; with two executors each enforces its share of the cap."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from fastapi.testclient import TestClient

from catalog.models import Capability, OnnxArtifact, PackageCapability
from compute_agents.app import create_app
from compute_agents.releases import HOUR_NS, HourlyCalls, Release
from compute_agents.wire import ApiError
from entitlements.selectors import entitlement_snapshot
from entitlements.services import issue_api_key
from releases.services import CapabilitySpec, PlanSpec, StageSpec, create_plan
from tests.compute_agents.agent_harness import start_agent
from tests.compute_agents.openai_server import records
from tests.compute_agents.publisher import model_id_of
from tests.factories import ContractFactory, signing_agent
from tests.package_factory.onnx_models import linear_model

X = [[1.0, 2.0, 3.0, 4.0]]
CAP = 100


def gray_contract(tiny_model: Path, onnx: bytes) -> Any:
    """A package of an ONNX OCR capability and the agent's MoE model (clause extraction), in a plan whose
    first stage turns on OCR only, capped at 100 calls an hour."""
    contract = ContractFactory.create(code="gray-acme", package__code="gray-review")
    digest = hashlib.sha256(onnx).hexdigest()
    artifact = OnnxArtifact.objects.create(sha256=digest, content=onnx, size=len(onnx), opset=17)
    ocr = Capability.objects.create(
        code="gray-ocr",
        name="OCR",
        engine="onnx",
        model_id="onnx/gray-ocr",
        artifact=artifact,
        sla_timeout_ms=1000,
    )
    clauses = Capability.objects.create(
        code="gray-clauses",
        name="Clauses",
        engine="moe",
        model_id=model_id_of(tiny_model),
        sla_timeout_ms=5000,
    )
    for capability in (ocr, clauses):
        PackageCapability.objects.create(package=contract.package, capability=capability)
    stages = [StageSpec("OCR only", [CapabilitySpec("gray-ocr", hourly_cap=CAP)])]
    create_plan(spec=PlanSpec("gray-acme-launch", "Launch", contract.code, stages=stages), now=timezone.now())
    return contract


def onnx_config(directory: Path, onnx: bytes) -> Path:
    (directory / "ocr.onnx").write_bytes(onnx)
    entry = {
        "code": "gray-ocr",
        "model": "onnx/gray-ocr",
        "packages": ["gray-review"],
        "artifact": {"path": "ocr.onnx", "sha256": hashlib.sha256(onnx).hexdigest()},
        "inputs": [{"name": "x", "dtype": "float32", "shape": [None, 4]}],
        "outputs": [{"name": "y", "dtype": "float32", "shape": [None, 2]}],
        "timeout_ms": 1000,
    }
    config = directory / "onnx.json"
    config.write_text(json.dumps({"capabilities": [entry]}))
    return config


@pytest.mark.usefixtures("clickhouse")
@pytest.mark.django_db(transaction=True)
def test_the_agent_refuses_an_off_capability_and_a_call_above_the_hourly_cap_with_a_rejected_record(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    onnx = linear_model()
    contract = gray_contract(tiny_model, onnx)
    key = issue_api_key(contract_code=contract.code).secret
    harness = start_agent(
        live_server.url, tiny_model, tmp_path / "agent", [contract], onnx_config=onnx_config(tmp_path, onnx)
    )
    client = TestClient(create_app(harness.agent.service))
    bearer = {"Authorization": f"Bearer {key}"}

    def ocr() -> Any:
        return client.post("/v1/capabilities/gray-ocr/invocations", json={"inputs": {"x": X}}, headers=bearer)

    hour = time.time_ns() // HOUR_NS
    answers = [ocr().status_code for _ in range(CAP)]
    above = ocr()
    if time.time_ns() // HOUR_NS != hour:
        pytest.skip("the UTC hour turned while the calls were made")
    assert answers == [200] * CAP
    assert above.status_code == 429
    assert above.json()["error"]["code"] == "hourly_cap_reached"
    assert 1 <= int(above.headers["Retry-After"]) <= 3600 and above.headers["x-should-retry"] == "false"

    body = {"model": model_id_of(tiny_model), "prompt": "Review the clause.", "max_tokens": 2}
    off = client.post("/v1/completions", json=body, headers=bearer)
    assert off.status_code == 403 and off.json()["error"]["code"] == "capability_not_released"

    spooled = [(r["model_id"], r["status"]) for r in records(harness.agent.service)]
    assert spooled.count(("onnx/gray-ocr", "ok")) == CAP
    assert spooled.count(("onnx/gray-ocr", "rejected")) == 1  # the call above the cap
    assert spooled.count((model_id_of(tiny_model), "rejected")) == 1  # the capability that is off
    assert harness.agent.shipper.drain() == CAP + 2  # the platform takes the refusals too


@pytest.mark.django_db
def test_two_executors_each_enforce_their_share_of_the_cap(tiny_model: Path) -> None:
    contract = gray_contract(tiny_model, linear_model())
    issue_api_key(contract_code=contract.code)
    first = signing_agent(contract, agent_id="gpu-a")
    second = signing_agent(contract, agent_id="gpu-b")
    signing_agent(contract, agent_id="l1-router", kind="router")  # routers forward, executors enforce
    shares = [
        entitlement_snapshot(agent.key_row)["keys"][0]["release"]["models"][0] for agent in (first, second)
    ]
    assert shares == [
        {"model_id": "onnx/gray-ocr", "hourly_cap": 50, "plan_hourly_cap": CAP},
        {"model_id": "onnx/gray-ocr", "hourly_cap": 50, "plan_hourly_cap": CAP},
    ]


def test_the_hourly_count_starts_again_each_utc_hour_and_a_refused_call_is_given_back() -> None:
    release = Release("plan", 1, (("ocr", 2), ("free", None)))
    counted = HourlyCalls()
    hour = 1_800_000 * HOUR_NS
    assert counted.take("c", "p", release, "ocr", hour) and counted.take("c", "p", release, "ocr", hour + 1)
    with pytest.raises(ApiError) as refused:
        counted.take("c", "p", release, "ocr", hour + HOUR_NS - 10**9)
    assert (refused.value.status, refused.value.headers["Retry-After"]) == (429, "1")
    assert counted.take("c", "other-package", release, "ocr", hour + 2)  # counted per contract package
    counted.give_back("c", "p", "ocr", hour + 3)
    assert counted.take("c", "p", release, "ocr", hour + 4)
    assert counted.take("c", "p", release, "ocr", hour + HOUR_NS)  # the next hour
    assert counted.count("c", "p", "ocr") == 1
    assert all(counted.take("c", "p", release, "free", hour + HOUR_NS + k) for k in range(500))
    with pytest.raises(ApiError) as off:
        counted.take("c", "p", release, "clauses", hour)
    assert (off.value.status, off.value.code) == (403, "capability_not_released")
    assert not counted.take("c", "p", None, "anything", hour)  # no release: nothing counted


def test_a_snapshot_release_of_another_shape_is_refused() -> None:
    assert Release.from_snapshot(
        {"plan": "p", "stage": 2, "models": [{"model_id": "m", "hourly_cap": None, "plan_hourly_cap": None}]}
    ) == Release("p", 2, (("m", None),))
    bad_entries: list[Any] = [
        {"plan": "p", "stage": 1},
        {"plan": "p", "stage": 1, "models": [{"model_id": 3}]},
        [],
    ]
    for bad in bad_entries:
        with pytest.raises(ValueError):
            Release.from_snapshot(bad)
