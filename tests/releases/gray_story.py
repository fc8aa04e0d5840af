"""The design's gray release as test ground: a contract-review package of OCR and clause extraction
(f1 ≥ 0.92), and its three-stage plan: day 1 OCR only, capped at 100 calls an hour, billing off; day 2
clause extraction too, gated at 90 % accepted over 20 calls, billing off, promoted automatically;
day 3 everything, billing on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from catalog.models import Capability, PackageCapability
from contracts.models import Contract
from releases.models import ReleasePlan
from releases.services import CapabilitySpec, PlanSpec, StageSpec, create_plan
from tests.factories import ContractFactory, SigningAgent

DAY_1 = datetime(2026, 11, 2, tzinfo=UTC)
DAY_2 = DAY_1 + timedelta(days=1)
DAY_3 = DAY_2 + timedelta(days=1)


def review_contract(code: str = "acme-review") -> Contract:
    """A contract whose package holds OCR and clause extraction (f1 ≥ 0.92)."""
    contract = ContractFactory.create(
        code=code, package__code=f"{code}-pkg", package__unit="contract_review_event"
    )
    for capability in (
        Capability.objects.create(
            code=f"{code}-ocr", name="OCR", engine="moe", model_id=f"{code}/ocr", sla_timeout_ms=1000
        ),
        Capability.objects.create(
            code=f"{code}-clauses",
            name="Clause extraction",
            engine="moe",
            model_id=f"{code}/clauses",
            sla_timeout_ms=2000,
            acceptance_rule="outcome_f1 >= 0.92",
        ),
    ):
        PackageCapability.objects.create(package=contract.package, capability=capability)
    return contract


def three_stages(contract: Contract, now: datetime = DAY_1) -> ReleasePlan:
    code = contract.code
    spec = PlanSpec(
        code=f"{code}-launch",
        name="Contract review launch",
        contract=code,
        stages=[
            StageSpec("Day 1: OCR only", [CapabilitySpec(f"{code}-ocr", hourly_cap=100)]),
            StageSpec(
                "Day 2: clause extraction, verified",
                [CapabilitySpec(f"{code}-ocr", gated=False), CapabilitySpec(f"{code}-clauses")],
                promotion="automatic",
                gate_min_acceptance=Decimal("0.9"),
                gate_min_calls=20,
                duration_hours=24,
            ),
            StageSpec(
                "Day 3: everything, billed",
                [CapabilitySpec(f"{code}-ocr"), CapabilitySpec(f"{code}-clauses")],
                billing_on=True,
            ),
        ],
    )
    return create_plan(spec=spec, now=now)


def calls(
    agent: SigningAgent, contract: Contract, capability: str, start: datetime, count: int, **fields: Any
) -> list[dict[str, Any]]:
    """`count` signed records of one capability, a second apart from `start`."""
    base = int(start.timestamp()) * 10**9
    return [
        agent.record(
            contract,
            model_id=f"{contract.code}/{capability}",
            package=contract.package.code,
            start_ns=base + k * 10**9,
            **fields,
        )
        for k in range(count)
    ]
