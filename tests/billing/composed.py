"""A contract composed of two packages that share OCR, and its capability calls as signed records: the
business-event tests' common ground (events reported, events billed, events verified)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from catalog.models import Capability, ComputePackage, PackageCapability
from contracts.models import Contract, ContractPackage
from tests.factories import ContractFactory, SigningAgent

SECONDS = itertools.count(1)  # each call a second after the one before
DAY = int(datetime(2026, 11, 10, tzinfo=UTC).timestamp()) * 10**9


def capability(code: str, rule: str = "") -> Capability:
    return Capability.objects.create(
        code=code,
        name=code,
        engine="moe",
        model_id=f"model-{code}",
        sla_timeout_ms=1000,
        acceptance_rule=rule,
    )


def composed_contract() -> Contract:
    """supplier = OCR + clause extraction (f1 ≥ 0.92) + an optional summary; logistics = OCR + routes."""
    contract = ContractFactory.create(
        code="acme-2026", package__code="supplier", package__unit="supplier_event"
    )
    logistics = ComputePackage.objects.create(code="logistics", name="Logistics", unit="shipment_event")
    ContractPackage.objects.create(contract=contract, package=logistics)
    ocr, clauses = capability("ocr"), capability("clauses", "outcome_f1 >= 0.92")
    summary, routes = capability("summary"), capability("routes", "outcome_on_time >= 1")
    for package, held in ((contract.package, (ocr, clauses)), (logistics, (ocr, routes))):
        for item in held:
            PackageCapability.objects.create(package=package, capability=item)
    PackageCapability.objects.create(package=contract.package, capability=summary, required=False)
    return contract


def call(
    agent: SigningAgent, contract: Contract, event: str, model: str, package: str = "supplier", **fields: Any
) -> dict[str, Any]:
    """One capability call of the event, a second after the one before (at `DAY`, unless `start_ns`)."""
    fields.setdefault("start_ns", DAY + next(SECONDS) * 10**9)
    return agent.record(
        contract,
        client_request_id=event,
        model_id=f"model-{model}",
        package=package,
        **fields,
    )
