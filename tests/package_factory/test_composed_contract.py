"""One contract holding two packages that share a capability: each key is issued for one package, the
platform's snapshot gives it that package's models, and the real agent serves a key only its own
package's capabilities and models, the shared one included."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from catalog.models import Capability, ComputePackage, OnnxArtifact, PackageCapability
from compute_agents.app import create_app
from contracts.models import ContractPackage
from entitlements.services import issue_api_key
from tests.api.conftest import token_client
from tests.compute_agents.agent_harness import start_agent
from tests.compute_agents.openai_server import records
from tests.compute_agents.publisher import model_id_of
from tests.factories import ContractFactory
from tests.package_factory.onnx_models import linear_model

X = [[1.0, 2.0, 3.0, 4.0]]


def capability(code: str, model_id: str, *, onnx: bytes | None = None) -> Capability:
    artifact = None
    if onnx is not None:
        digest = hashlib.sha256(onnx).hexdigest()
        artifact = OnnxArtifact.objects.create(sha256=digest, content=onnx, size=len(onnx), opset=17)
    engine = "onnx" if onnx is not None else "moe"
    return Capability.objects.create(
        code=code, name=code, engine=engine, model_id=model_id, artifact=artifact, sla_timeout_ms=1000
    )


def composed(package: ComputePackage, *capabilities: Capability) -> None:
    for held in capabilities:
        PackageCapability.objects.create(package=package, capability=held)


@pytest.mark.usefixtures("clickhouse")
@pytest.mark.django_db(transaction=True)
def test_two_packages_of_one_contract_share_ocr_and_keep_their_own_models_apart(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create(package__code="supplier")
    logistics = ComputePackage.objects.create(code="logistics", name="Logistics")
    ContractPackage.objects.create(contract=contract, package=logistics)
    model = linear_model()
    ocr = capability("shared-ocr", "onnx/shared-ocr", onnx=model)
    review = capability("supplier-review", model_id_of(tiny_model))  # the agent's MoE model
    routes = capability("logistics-routes", "onnx/routes")
    composed(contract.package, ocr, review)
    composed(logistics, ocr, routes)
    supplier_key = issue_api_key(contract_code=contract.code).secret
    logistics_key = issue_api_key(contract_code=contract.code, package_code="logistics").secret

    config = tmp_path / "onnx.json"
    (tmp_path / "ocr.onnx").write_bytes(model)
    x, y = (
        {"name": "x", "dtype": "float32", "shape": [None, 4]},
        {"name": "y", "dtype": "float32", "shape": [None, 2]},
    )
    entry = {
        "code": "shared-ocr",
        "model": "onnx/shared-ocr",
        "packages": ["supplier", "logistics"],
        "artifact": {"path": "ocr.onnx", "sha256": ocr.artifact_id},
        "inputs": [x],
        "outputs": [y],
        "timeout_ms": 1000,
    }
    config.write_text(json.dumps({"capabilities": [entry]}))
    harness = start_agent(live_server.url, tiny_model, tmp_path / "agent", [contract], onnx_config=config)
    client = TestClient(create_app(harness.agent.service))

    def ocr_call(key: str) -> Any:
        return client.post(
            "/v1/capabilities/shared-ocr/invocations", json={"inputs": {"x": X}}, headers=bearer(key)
        )

    def chat(key: str) -> Any:
        body = {"model": model_id_of(tiny_model), "prompt": "Review the clause.", "max_tokens": 2}
        return client.post("/v1/completions", json=body, headers=bearer(key))

    assert ocr_call(supplier_key).status_code == 200  # the shared capability, from either package
    assert ocr_call(logistics_key).status_code == 200
    assert chat(supplier_key).status_code == 200  # the supplier package's own model
    refused = chat(logistics_key)  # the logistics package holds no such model
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "model_not_found"

    packages = sorted((r["package"], r["model_id"], r["status"]) for r in records(harness.agent.service))
    assert packages == [
        ("logistics", "onnx/shared-ocr", "ok"),
        ("logistics", model_id_of(tiny_model), "rejected"),  # the model it asked for, refused
        ("supplier", "onnx/shared-ocr", "ok"),
        ("supplier", model_id_of(tiny_model), "ok"),
    ]
    assert harness.agent.shipper.drain() == 4  # and the platform takes each under its package


@pytest.mark.django_db
def test_a_key_is_issued_only_for_a_package_its_contract_holds() -> None:
    contract = ContractFactory.create()
    other = ComputePackage.objects.create(code="not-held", name="Not held")
    answer = token_client(contract.tenant).post(
        "/v1/keys", data={"contract": contract.code, "package": "not-held"}, content_type="application/json"
    )
    assert answer.status_code == 400
    assert answer.json()["code"] == "package_not_in_contract"
    assert answer.json()["details"] == {"package": "not-held", "held": [contract.package.code]}
    ContractPackage.objects.create(contract=contract, package=other)
    issued = token_client(contract.tenant).post(
        "/v1/keys", data={"contract": contract.code, "package": "not-held"}, content_type="application/json"
    )
    assert issued.status_code == 201 and issued.json()["package"] == "not-held"
    listed = token_client(contract.tenant).get("/v1/keys").json()["results"]
    assert [k["package"] for k in listed] == ["not-held"]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
