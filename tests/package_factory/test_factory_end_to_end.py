"""From an upload to a billed request, on real services: the factory builds the package, the tenant buys
it and makes a key, the real agent serves the capability from the very manifest the factory wrote, the
record is shipped and stored, and the invoice bills it at the declared price per event."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.utils import timezone
from fastapi.testclient import TestClient

from billing.services import generate_invoice
from catalog.models import HostCostProfile
from common.periods import month_bounds
from compute_agents.app import create_app
from contracts.models import Contract
from tests.api.conftest import token_client
from tests.compute_agents.agent_harness import start_agent
from tests.factories import TenantFactory
from tests.package_factory.onnx_models import BIAS, WEIGHTS, linear_model
from tests.package_factory.test_factory_api import declaration, upload

X = [[1.0, 2.0, 3.0, 4.0], [0.5, -1.5, 2.25, 0.0]]


def deploy(build: dict[str, Any], artifact: bytes, directory: Path) -> Path:
    """What an operator does with the build: the model file fetched by digest into the models volume,
    the executor configuration beside it (its artifact path made local to this directory)."""
    directory.mkdir(parents=True)
    (directory / "claims.onnx").write_bytes(artifact)
    config = json.loads(json.dumps(build["executor_config"]))
    config["capabilities"][0]["artifact"]["path"] = "claims.onnx"
    path = directory / "onnx.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.usefixtures("clickhouse")
@pytest.mark.django_db(transaction=True)
def test_a_built_package_is_bought_served_from_its_manifest_and_billed_per_event(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    HostCostProfile.objects.create(
        host_class="cpu-2",
        currency="CNY",
        depreciation_per_hour=Decimal(2),
        power_per_hour=Decimal(0),
        operations_per_hour=Decimal(1),
    )
    tenant = TenantFactory.create()
    owner = token_client(tenant)
    built = upload(
        owner, linear_model(), declaration("claims", base_fee="100.00"), "insurance-claim-documents"
    )
    assert built.status_code == 201, built.content
    build = built.json()
    bought = owner.post(
        "/v1/purchases", data={"package": "claims", "plan": "standard"}, content_type="application/json"
    )
    assert bought.status_code == 201, bought.content
    contract = Contract.objects.get(code=bought.json()["contract"]["code"])
    key = owner.post(
        "/v1/keys", data={"contract": contract.code, "sla_class": "standard"}, content_type="application/json"
    )
    assert key.status_code == 201, key.content
    artifact = owner.get(f"/v1/factory/artifacts/{build['artifact_sha256']}").content

    config = deploy(build, artifact, tmp_path / "executor")
    harness = start_agent(live_server.url, tiny_model, tmp_path / "agent", [contract], onnx_config=config)
    client = TestClient(create_app(harness.agent.service))
    headers = {"Authorization": f"Bearer {key.json()['api_key']}"}
    url = "/v1/capabilities/claims-clauses/invocations"
    answers = [client.post(url, json={"inputs": {"x": X}}, headers=headers) for _ in range(3)]
    refused = client.post(url, json={"inputs": {"x": [[1.0]]}}, headers=headers)

    assert [a.status_code for a in answers] == [200, 200, 200] and refused.status_code == 400
    expected = np.array(X, np.float32) @ WEIGHTS + BIAS
    np.testing.assert_allclose(answers[0].json()["outputs"]["y"], expected, rtol=1e-6)
    assert harness.agent.shipper.drain() == 4

    start, end = month_bounds(timezone.now().strftime("%Y-%m"))
    invoice = generate_invoice(contract.pk, start, end, now=end)  # once the month is over
    lines = {line.dimension or line.kind: line for line in invoice.lines.all()}
    requests = lines["requests"]
    assert (requests.quantity, requests.unit_price, requests.amount) == (
        Decimal(3),
        Decimal("3.20"),  # the insurance template's price per claim document
        Decimal("9.60"),
    )
    base_fee = lines["base_fee"]  # the plan's, prorated from the purchase to the month's end
    assert base_fee.unit_price == Decimal(100) and 0 < base_fee.quantity <= 1
    assert base_fee.amount == (base_fee.quantity * 100).quantize(Decimal("0.01"))
    assert invoice.subtotal == Decimal("9.60") + base_fee.amount
