"""The package factory: an uploaded ONNX model and a declaration become a capability, a package, a plan,
an SLA policy and the executor's deployment manifests, all or nothing.

On retry: a build is one transaction, so a failed one leaves nothing; a repeated successful one is
refused with 409 `package_exists` (the codes are taken), or answered again under the same
Idempotency-Key."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from accounts.access import Principal
from catalog.models import Capability, ComputePackage, OnnxArtifact, PackageCapability, PackagePlan, PlanPrice
from pricing.charge_models import PER_UNIT
from pricing.dimensions import Dimension
from sla.models import Objective, SlaPolicy

from .errors import FactoryError, PackageExists
from .manifests import compose_service, executor_config, kubernetes_manifest
from .models import PackageBuild
from .onnx_model import TensorSpec, check_declared, inspect_model
from .probe import measure_seconds_per_event
from .quote import Quote, cost_profile, quote_base_fee
from .spec import PackageSpec, merged, parse_spec
from .templates import template

PLAN_CODE = "standard"
LATENCY_TARGET_PERCENT = Decimal(99)  # "p99 ≤ X ms": 99 % of the requests within X ms


def build_package(
    principal: Principal, declaration: Any, model: bytes, *, template_code: str = ""
) -> PackageBuild:
    started = time.perf_counter()
    if principal.tenant is None:
        raise FactoryError(
            "tenant_required", "A package is built for a tenant; staff users cannot build.", {}
        )
    if not isinstance(declaration, dict):
        raise FactoryError("invalid_spec", "The declaration is a JSON object.", {"field": ""})
    full = merged(template(template_code).spec, declaration) if template_code else declaration
    spec = parse_spec(full)
    signature = inspect_model(model, settings.FACTORY_MAX_MODEL_BYTES)
    check_declared("inputs", spec.inputs, signature.inputs)
    check_declared("outputs", spec.outputs, signature.outputs)
    seconds = measure_seconds_per_event(model, spec.inputs)
    quote = quote_base_fee(
        cost_profile(spec.host_class),
        currency=spec.prices.currency,
        seconds_per_event=seconds,
        events_per_month=spec.prices.events_per_month,
        margin_factor=spec.prices.margin_factor,
        base_fee=spec.prices.base_fee,
    )
    with transaction.atomic():
        _refuse_taken_codes(spec)
        artifact, _ = OnnxArtifact.objects.get_or_create(
            sha256=signature.sha256,
            defaults={"content": model, "size": signature.size, "opset": signature.opset},
        )
        capability = _capability(principal, spec, artifact)
        package = _package(principal, spec, capability, quote)
        _sla_policy(package, spec)
        inputs = [t.as_dict() for t in spec.inputs]
        outputs = [t.as_dict() for t in spec.outputs]
        config = executor_config(capability, package.code, inputs, outputs)
        return PackageBuild.objects.create(
            tenant=principal.tenant,
            package=package,
            capability=capability,
            template=template_code,
            spec=full,
            quote=quote.as_dict(),
            executor_config=config,
            compose_service=compose_service(capability),
            kubernetes_manifest=kubernetes_manifest(capability, config, settings.FACTORY_EXECUTOR_IMAGE),
            build_seconds=Decimal(time.perf_counter() - started).quantize(Decimal("0.001")),
            created_by_id=principal.user_id,
        )


def _refuse_taken_codes(spec: PackageSpec) -> None:
    if ComputePackage.objects.filter(code=spec.package_code).exists():
        raise PackageExists(
            "package_exists", f"A package {spec.package_code!r} exists already.", {"field": "package.code"}
        )
    if Capability.objects.filter(code=spec.capability_code).exists():
        raise PackageExists(
            "capability_exists",
            f"A capability {spec.capability_code!r} exists already.",
            {"field": "capability.code"},
        )


def tensor_schema(tensors: tuple[TensorSpec, ...]) -> dict[str, Any]:
    """The JSON Schema of an object holding the tensors as nested arrays (`x-dtype` names the type)."""
    leaf = {
        "float32": "number",
        "float64": "number",
        "int32": "integer",
        "int64": "integer",
        "bool": "boolean",
    }
    properties: dict[str, Any] = {}
    for tensor in tensors:
        node: dict[str, Any] = {"type": leaf[tensor.dtype]}
        for size in reversed(tensor.shape):
            node = {"type": "array", "items": node} | ({"minItems": size, "maxItems": size} if size else {})
        properties[tensor.name] = node | {"x-dtype": tensor.dtype, "x-shape": list(tensor.shape)}
    return {
        "type": "object",
        "properties": properties,
        "required": [t.name for t in tensors],
        "additionalProperties": False,
    }


def _capability(principal: Principal, spec: PackageSpec, artifact: OnnxArtifact) -> Capability:
    capability = Capability(
        code=spec.capability_code,
        name=spec.capability_name,
        owner=principal.tenant,
        engine=Capability.Engine.ONNX,
        model_id=f"onnx/{spec.capability_code}",
        artifact=artifact,
        input_schema=tensor_schema(spec.inputs),
        output_schema=tensor_schema(spec.outputs),
        sla_timeout_ms=spec.sla.timeout_ms,
        acceptance_rule=spec.acceptance_rule,
    )
    _saved(capability, "capability")
    return capability


def _package(principal: Principal, spec: PackageSpec, capability: Capability, quote: Quote) -> ComputePackage:
    package = ComputePackage(
        code=spec.package_code,
        name=spec.package_name,
        unit=spec.unit,
        description=spec.description,
        owner=principal.tenant,
        margin_factor=spec.prices.margin_factor,
    )
    _saved(package, "package")
    PackageCapability.objects.create(package=package, capability=capability, required=True)
    plan = PackagePlan(
        package=package,
        code=PLAN_CODE,
        name=spec.package_name,
        currency=spec.prices.currency,
        base_fee=quote.base_fee,
        payment=PackagePlan.Payment.INVOICE,
    )
    _saved(plan, "prices")
    _saved(
        PlanPrice(
            plan=plan,
            dimension=Dimension.REQUESTS,
            charge_model=PER_UNIT,
            unit_price=spec.prices.per_event,
            included_quantity=Decimal(spec.prices.included_events),
        ),
        "prices",
    )
    return package


def _sla_policy(package: ComputePackage, spec: PackageSpec) -> SlaPolicy:
    policy = SlaPolicy.objects.create(name=package.name, package=package)
    Objective.objects.create(
        policy=policy,
        name="availability",
        kind=Objective.Kind.AVAILABILITY,
        target_percent=spec.sla.availability_percent,
    )
    Objective.objects.create(
        policy=policy,
        name="latency-p99",
        kind=Objective.Kind.LATENCY,
        threshold_ms=Decimal(spec.sla.p99_ms),
        target_percent=LATENCY_TARGET_PERCENT,
    )
    return policy


def _saved(instance: Any, field: str) -> None:
    """full_clean() turned into the factory's error (naming the declaration's part), then save()."""
    try:
        instance.full_clean()
    except ValidationError as error:
        raise FactoryError(
            "invalid_spec", f"The {field} cannot be made: {'; '.join(error.messages)}", {"field": field}
        ) from None
    instance.save()
