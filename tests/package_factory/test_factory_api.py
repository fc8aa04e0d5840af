"""The package factory over its API: an uploaded ONNX model and a declaration become a capability, a
package, a plan, an SLA policy and the deployment manifests; bad models are refused, naming the problem."""

from __future__ import annotations

import hashlib
import json
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from catalog.models import Capability, ComputePackage, HostCostProfile, OnnxArtifact
from package_factory.models import PackageBuild
from sla.models import SlaPolicy
from tests.api.conftest import member_client, token_client
from tests.factories import TenantFactory
from tests.package_factory.onnx_models import LINEAR_INPUTS, LINEAR_OUTPUTS, linear_model, unchecked_model

pytestmark = pytest.mark.django_db

URL = "/v1/factory/packages"


@pytest.fixture(autouse=True)
def cost_profile() -> HostCostProfile:
    return HostCostProfile.objects.create(
        host_class="cpu-2",
        currency="CNY",
        depreciation_per_hour=Decimal("2.0000"),
        power_per_hour=Decimal("0.5000"),
        operations_per_hour=Decimal("1.0000"),
    )


def declaration(code: str = "acme-review", **prices: Any) -> dict[str, Any]:
    return {
        "package": {"code": code, "name": "ACME contract review"},
        "capability": {"code": f"{code}-clauses", "inputs": LINEAR_INPUTS, "outputs": LINEAR_OUTPUTS},
        "prices": {"events_per_month": 3_600_000, **prices},
    }


def upload(client: Client, model: bytes, spec: dict[str, Any], template: str = "contract-review") -> Any:
    form = {
        "model": SimpleUploadedFile("model.onnx", model, content_type="application/octet-stream"),
        "declaration": json.dumps(spec),
        "template": template,
    }
    return client.post(URL, data=form)


def built_nothing() -> bool:
    return not (
        PackageBuild.objects.exists()
        or ComputePackage.objects.exists()
        or Capability.objects.exists()
        or OnnxArtifact.objects.exists()
    )


def test_an_upload_from_a_template_builds_the_package_its_plan_sla_and_manifests() -> None:
    tenant = TenantFactory.create()
    model = linear_model()
    answer = upload(token_client(tenant, "developer"), model, declaration())

    assert answer.status_code == 201, answer.content
    build = answer.json()
    digest = hashlib.sha256(model).hexdigest()
    assert (build["package"], build["capability"], build["model_id"], build["artifact_sha256"]) == (
        "acme-review",
        "acme-review-clauses",
        "onnx/acme-review-clauses",
        digest,
    )
    # The template's terms where the declaration is silent.
    package = ComputePackage.objects.get(code="acme-review")
    assert (package.owner, package.unit, package.name) == (
        tenant,
        "contract_review_event",
        "ACME contract review",
    )
    capability = package.capabilities.get()
    assert (capability.engine, capability.sla_timeout_ms, capability.acceptance_rule) == (
        "onnx",
        3000,
        "outcome_f1 >= 0.92",
    )
    assert capability.input_schema["properties"]["x"] == {
        "type": "array",
        "items": {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4},
        "x-dtype": "float32",
        "x-shape": [None, 4],
    }
    plan = package.plans.get()
    price = plan.prices.get()
    assert (plan.code, plan.currency, price.dimension, price.unit_price) == (
        "standard",
        "CNY",
        "requests",
        Decimal("12.50"),
    )
    policy = SlaPolicy.objects.get(package=package)
    assert sorted((o.name, o.kind, o.threshold_ms, o.target_percent) for o in policy.objectives.all()) == [
        ("availability", "availability", None, Decimal("99.5000")),
        ("latency-p99", "latency", Decimal("300.000"), Decimal("99.0000")),
    ]

    # The quote: (hardware + operations) × margin, on the measured seconds per event.
    quote = build["quote"]
    seconds = Decimal(quote["seconds_per_event"])
    assert seconds > 0
    hours = seconds * 3_600_000 / 3600
    assert Decimal(quote["hardware"]) == (hours * Decimal("2.5")).quantize(Decimal("1e-10"))
    assert Decimal(quote["operations"]) == (hours * Decimal("1.0")).quantize(Decimal("1e-10"))
    expected = (hours * Decimal("3.5") * Decimal("1.3")).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    assert (quote["proposed_base_fee"], quote["base_fee"], quote["base_fee_source"]) == (
        str(expected),
        str(expected),
        "proposed",
    )
    assert plan.base_fee == expected
    assert quote["formula"] == f"({quote['hardware']} + {quote['operations']}) × 1.3 = {expected} CNY"

    # The manifests: the executor's configuration pins the file's digest; compose and Kubernetes run it.
    entry = build["executor_config"]["capabilities"][0]
    assert entry == {
        "code": "acme-review-clauses",
        "model": "onnx/acme-review-clauses",
        "package": "acme-review",
        "artifact": {"path": "/var/lib/treemeter-agent/models/acme-review-clauses.onnx", "sha256": digest},
        "inputs": LINEAR_INPUTS,
        "outputs": LINEAR_OUTPUTS,
        "timeout_ms": 3000,
    }
    # The compose service uses docker/compose.yaml's anchors, as its executors do.
    anchors = "x-serving: &serving {image: treemeter-agent}\nx-serving-env: &serving-env {A: b}\n"
    service = yaml.safe_load(anchors + build["compose_service"])["services"]["executor-acme-review-clauses"]
    assert service["image"] == "treemeter-agent"
    assert service["environment"] == {"A": "b", "TREEMETER_AGENT_ID": "executor-acme-review-clauses"}
    assert "--onnx-config" in service["command"]
    config_map, deployment = yaml.safe_load_all(build["kubernetes_manifest"])
    assert json.loads(config_map["data"]["acme-review-clauses.json"]) == build["executor_config"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert (deployment["kind"], container["image"]) == ("Deployment", "treemeter-agent:latest")

    # The file the manifests fetch, by its digest.
    fetched = token_client(tenant, "read_only").get(f"/v1/factory/artifacts/{digest}")
    assert (fetched.status_code, fetched.content) == (200, model)
    assert Decimal(build["build_seconds"]) > 0


def test_the_customer_may_set_the_base_fee_instead_of_the_proposal() -> None:
    tenant = TenantFactory.create()
    answer = upload(token_client(tenant), linear_model(), declaration(base_fee="99.00"))
    assert answer.status_code == 201, answer.content
    quote = answer.json()["quote"]
    assert (quote["base_fee"], quote["base_fee_source"]) == ("99.00", "customer")
    assert ComputePackage.objects.get(code="acme-review").plans.get().base_fee == Decimal("99.00")

    refused = upload(token_client(tenant), linear_model(), declaration("other", base_fee="99.001"))
    assert refused.status_code == 400
    assert (refused.json()["code"], refused.json()["details"]["field"]) == ("invalid_spec", "prices.base_fee")


@pytest.mark.parametrize(
    ("model", "spec", "status", "code", "details"),
    [
        pytest.param(b"PK\x03\x04 a zip, not a model", declaration(), 400, "not_onnx", {}, id="not-onnx"),
        pytest.param(
            unchecked_model(27),
            declaration() | {"capability": {"code": "c", "inputs": LINEAR_INPUTS, "outputs": LINEAR_OUTPUTS}},
            400,
            "opset_unsupported",
            {"opset": 27, "min_opset": 7, "max_opset": 26},
            id="opset",
        ),
        pytest.param(
            linear_model(features=6),
            declaration(),
            400,
            "schema_mismatch",
            {"side": "inputs", "tensor": "x", "declared": [None, 4], "model": [None, 6]},
            id="shape",
        ),
        pytest.param(
            linear_model(),
            declaration()
            | {
                "capability": {
                    "code": "c",
                    "inputs": [{"name": "pixels", "dtype": "float32", "shape": [None, 4]}],
                    "outputs": LINEAR_OUTPUTS,
                }
            },
            400,
            "schema_mismatch",
            {"side": "inputs", "declared": ["pixels"], "model": ["x"]},
            id="names",
        ),
        pytest.param(
            linear_model(),
            declaration()
            | {
                "capability": {
                    "code": "c",
                    "inputs": [{"name": "x", "dtype": "int64", "shape": [None, 4]}],
                    "outputs": LINEAR_OUTPUTS,
                }
            },
            400,
            "schema_mismatch",
            {"side": "inputs", "tensor": "x", "declared": "int64", "model": "float32"},
            id="dtype",
        ),
        pytest.param(
            linear_model(features=4000),
            declaration(),
            413,
            "model_too_large",
            {"max_bytes": 16_000},
            id="too-large",
        ),
    ],
)
def test_bad_models_are_refused_naming_the_problem_and_nothing_is_built(
    settings: Any, model: bytes, spec: dict[str, Any], status: int, code: str, details: dict[str, Any]
) -> None:
    settings.FACTORY_MAX_MODEL_BYTES = 16_000
    answer = upload(token_client(TenantFactory.create()), model, spec)

    assert answer.status_code == status, answer.content
    body = answer.json()
    assert body["code"] == code
    assert details.items() <= body["details"].items()
    assert built_nothing()


def test_a_declaration_is_checked_field_by_field() -> None:
    client = token_client(TenantFactory.create())
    cases: list[tuple[dict[str, dict[str, Any]], str]] = [
        ({"package": {"code": "Bad Code"}}, "package.code"),
        ({"prices": {"per_event": "twelve"}}, "prices.per_event"),
        ({"prices": {"currency": "XYZ"}}, "prices.currency"),
        ({"sla": {"availability_percent": "100"}}, "sla.availability_percent"),
        (
            {"capability": {"inputs": [{"name": "x", "dtype": "float32", "shape": [0, 4]}]}},
            "capability.inputs[0].shape",
        ),
        ({"capability": {"acceptance_rule": "outcome_f1 >>= 1"}}, "capability"),
    ]
    for change, field in cases:
        spec = declaration()
        for part, values in change.items():
            spec[part] = spec.get(part, {}) | values
        answer = upload(client, linear_model(), spec)
        assert answer.status_code == 400, (field, answer.content)
        assert (answer.json()["code"], answer.json()["details"]["field"]) == ("invalid_spec", field)
    assert built_nothing()

    unknown = upload(client, linear_model(), declaration(), template="knitting")
    assert (unknown.status_code, unknown.json()["code"]) == (400, "template_not_found")
    not_json = client.post(
        URL, data={"model": SimpleUploadedFile("m.onnx", linear_model()), "declaration": "{"}
    )
    assert (not_json.status_code, not_json.json()["code"]) == (400, "malformed_json")


def test_taken_codes_are_a_conflict_and_a_retry_builds_nothing_twice() -> None:
    client = token_client(TenantFactory.create())
    assert upload(client, linear_model(), declaration()).status_code == 201
    again = upload(client, linear_model(), declaration())
    assert (again.status_code, again.json()["code"]) == (409, "package_exists")
    assert PackageBuild.objects.count() == 1 and Capability.objects.count() == 1


def test_a_tenants_built_package_is_its_own() -> None:
    owner, other = TenantFactory.create(), TenantFactory.create()
    digest = upload(token_client(owner), linear_model(), declaration()).json()["artifact_sha256"]
    outsider = token_client(other)

    assert [p["code"] for p in outsider.get("/v1/packages").json()["results"]] == []
    assert outsider.get("/v1/packages/acme-review").status_code == 404
    assert outsider.get(f"{URL}/acme-review").status_code == 404
    assert outsider.get(URL).json()["results"] == []
    assert outsider.get(f"/v1/factory/artifacts/{digest}").status_code == 404
    bought = outsider.post(
        "/v1/purchases", data={"package": "acme-review", "plan": "standard"}, content_type="application/json"
    )
    assert (bought.status_code, bought.json()["code"]) == (404, "plan_not_found")

    mine = member_client(owner)
    assert [p["code"] for p in mine.get("/v1/packages").json()["results"]] == ["acme-review"]
    assert [b["package"] for b in mine.get(URL).json()["results"]] == ["acme-review"]
    purchase = mine.post(
        "/v1/purchases", data={"package": "acme-review", "plan": "standard"}, content_type="application/json"
    )
    assert purchase.status_code == 201, purchase.content


def test_read_only_members_cannot_build() -> None:
    answer = upload(token_client(TenantFactory.create(), "read_only"), linear_model(), declaration())
    assert answer.status_code == 403
    assert built_nothing()


def test_text_at_the_column_limits_is_built_and_one_past_them_or_a_control_character_is_refused() -> None:
    client = token_client(TenantFactory.create())
    longest = "c" * 64
    at_limit = declaration(longest)
    at_limit["package"]["name"] = "n" * 200
    at_limit["capability"] |= {"code": "k" * 64, "name": "m" * 200}
    at_limit["package"]["unit"] = "u" * 64
    assert upload(client, linear_model(), at_limit).status_code == 201
    package = ComputePackage.objects.get(code=longest)
    assert (len(package.name), len(package.unit), package.capabilities.get().model_id) == (
        200,
        64,
        "onnx/" + "k" * 64,
    )

    past = [
        ("package", "code", "p" * 65, "package.code"),
        ("package", "name", "n" * 201, "package.name"),
        ("package", "unit", "u" * 65, "package.unit"),
        ("capability", "code", "k" * 65, "capability.code"),
        ("capability", "name", "m" * 201, "capability.name"),
        ("capability", "name", "tab\tok but bell\x07", "capability.name"),
        ("package", "name", "null\x00", "package.name"),
    ]
    for part, key, value, field in past:
        spec = declaration("other")
        spec[part][key] = value
        answer = upload(client, linear_model(), spec)
        assert answer.status_code == 400, (field, answer.content)
        assert (answer.json()["code"], answer.json()["details"]["field"]) == ("invalid_spec", field)
    assert ComputePackage.objects.count() == 1
