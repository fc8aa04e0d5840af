"""The demo's past: what a fresh `make run` needs for every page to show real figures.

An SLA policy per package (availability, and latency per layer: L1 10 ms, L2 30 ms, L3 150 ms), the
host cost profile of the demo's host class, a plan on sale per package, and thirty days of usage with
a daily shape, signed by the demo's history agent and sent through the real ingest API. Then the
months the history touches get their SLA reports and the closed month its invoices.

Idempotent: the usage is sent once (a history agent that has records already is left as it is), and
the rest is `get_or_create` or a service that is itself idempotent.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from agents.services import register_agent
from billing.models import Invoice, Issuer
from billing.services import generate_invoice
from catalog.models import ComputePackage, HostCostProfile, PackagePlan, PlanPrice
from common.periods import month_bounds, month_of, previous_month
from contracts.models import Contract
from ingest.models import SequenceRange
from sla.models import CreditStep, Objective, SlaPolicy, SlaReport
from sla.services import compute_report
from treemeter_records import IngestClient, build_batch, make_record, private_key_from_seed, public_key_to_b64

from .services import DEMO_CONTRACTS, HOST_CLASS, DemoSetup, read_or_create_seed

HISTORY_AGENT_ID = "agent-demo-history"
BATCH_RECORDS = 5_000
TIME_ZONE = "Asia/Shanghai"
# Busy requests per hour at a weekday's peak, per contract; nights and weekends carry a share of it.
PEAK_PER_HOUR = {"acme-legal-review-2026": 14, "st-mary-matching-2026": 9, "nova-batch-2026": 6}
SLOW_DAY = 12  # days back: the L3 executors ran hot that day (the latency chart's dip)
OUTAGE = (20, 14, 16)  # days back, local hours [from, to): an executor outage fails a third of requests
LADDER = ((Decimal("99.9"), Decimal(10)), (Decimal(99), Decimal(25)), (Decimal(95), Decimal(100)))
LATENCY_OBJECTIVES = (  # layer, threshold ms, target %
    (Objective.Layer.L1, Decimal(10), Decimal(99)),
    (Objective.Layer.L2, Decimal(30), Decimal(99)),
    (Objective.Layer.L3, Decimal(150), Decimal(95)),
)
PLAN_BASE_FEE = {"CNY": Decimal("1000.00"), "USD": Decimal("150.00"), "EUR": Decimal("140.00")}


@dataclass(frozen=True)
class History:
    records: int  # sent now (0 when the history was there already)
    sla_reports: list[SlaReport]
    invoices: list[Invoice]


def seed_terms() -> None:
    """SLA policies, the host cost profile, a plan on sale per package and the invoices' issuer (each
    made once)."""
    Issuer.objects.get_or_create(
        code="treemeter",
        defaults={
            "legal_name": "Treemeter Demo Cloud Ltd. 树表演示云有限公司",
            "address": "88 Century Avenue, Pudong, Shanghai",
            "tax_id": "91310115DEMO00001X",
        },
    )
    HostCostProfile.objects.get_or_create(
        host_class=HOST_CLASS,
        defaults={
            "currency": "CNY",
            "depreciation_per_hour": Decimal("180.0000"),  # an accelerator host's share, CNY per hour
            "power_per_hour": Decimal("30.0000"),
            "operations_per_hour": Decimal("60.0000"),
        },
    )
    for spec in DEMO_CONTRACTS:
        package = ComputePackage.objects.get(code=spec.package)
        _sla_policy(package)
        plan, created = PackagePlan.objects.get_or_create(
            package=package,
            code="standard",
            defaults={
                "name": f"{spec.package_name}: standard",
                "currency": spec.currency,
                "base_fee": PLAN_BASE_FEE[spec.currency],
                "payment": PackagePlan.Payment.INVOICE,
            },
        )
        if created:
            PlanPrice.objects.bulk_create(
                PlanPrice(plan=plan, dimension=dimension, unit_price=price)
                for dimension, price in spec.prices.items()
            )


def _sla_policy(package: ComputePackage) -> SlaPolicy:
    policy, created = SlaPolicy.objects.get_or_create(
        package=package, defaults={"name": f"{package.name} SLA", "time_zone": TIME_ZONE}
    )
    if created:
        availability = Objective.objects.create(
            policy=policy,
            name="availability",
            kind=Objective.Kind.AVAILABILITY,
            target_percent=Decimal("99.9"),
        )
        CreditStep.objects.bulk_create(
            CreditStep(objective=availability, below_percent=below, credit_percent=credit)
            for below, credit in LADDER
        )
        for layer, ms, target in LATENCY_OBJECTIVES:
            Objective.objects.create(
                policy=policy,
                name=f"latency-{layer}",
                kind=Objective.Kind.LATENCY,
                layer=layer,
                threshold_ms=ms,
                target_percent=target,
            )
    return policy


def backfill(setup: DemoSetup, api_url: str, now: datetime, days: int, model: tuple[str, str]) -> History:
    """Send `days` of usage before `now` (once), then compute the SLA reports of the months it touches
    and the closed month's invoices."""
    seed = read_or_create_seed(setup.data_dir / "demo-history-agent-key")
    key = private_key_from_seed(seed)
    register_agent(
        agent_id=HISTORY_AGENT_ID,
        public_key_b64=public_key_to_b64(key),
        tenant_codes=[],
        contract_codes=[c.code for c in setup.contracts],
        host_class=HOST_CLASS,
    )
    sent = 0
    if not SequenceRange.objects.filter(agent__agent_id=HISTORY_AGENT_ID).exists():
        records = list(_records(setup.contracts, now, days, model))
        with IngestClient(api_url, timeout=120) as client:
            for first in range(0, len(records), BATCH_RECORDS):
                client.send(build_batch(records[first : first + BATCH_RECORDS], HISTORY_AGENT_ID, key))
        sent = len(records)
    months = sorted({month_of(now - timedelta(days=d), TIME_ZONE) for d in range(days + 1)})
    reports = [compute_report(c, month, now=now) for c in setup.contracts for month in months]
    closed = previous_month(month_of(now))
    invoices = [generate_invoice(c.pk, *month_bounds(closed), now=now) for c in setup.contracts]
    return History(sent, reports, invoices)


def _records(
    contracts: list[Contract], now: datetime, days: int, model: tuple[str, str]
) -> Iterator[dict[str, Any]]:
    """Every contract's requests, hour by hour, for the `days` before today (UTC), in time order and
    numbered from 0: a working-day curve peaking in the Shanghai afternoon, quieter weekends."""
    today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    zone = ZoneInfo(TIME_ZONE)
    seq = 0
    for hour in range(days * 24):
        at = today - timedelta(days=days) + timedelta(hours=hour)
        local = at.astimezone(zone)
        shape = _daily_shape(local.hour)
        weekday = 1.0 if local.weekday() < 5 else 0.35
        back = (today - at) // timedelta(days=1) + 1  # 1: the hours of yesterday
        slow = back == SLOW_DAY
        failing = 0.35 if back == OUTAGE[0] and OUTAGE[1] <= local.hour < OUTAGE[2] else 0.0005
        for contract in contracts:
            rng = random.Random(f"{contract.code}:{at.isoformat()}")  # noqa: S311 - demo data, not secrets
            count = round(PEAK_PER_HOUR[contract.code] * shape * weekday * rng.uniform(0.8, 1.2))
            for k in range(count):
                start_ns = int(at.timestamp()) * 10**9 + int((k + rng.random()) * 3.6e12 / count)
                yield _record(contract, seq, start_ns, rng, slow, failing, model)
                seq += 1


def _daily_shape(local_hour: int) -> float:
    """The share of the peak hour's traffic: a curve over the working day, a trickle at night."""
    if 7 <= local_hour <= 20:
        return 0.15 + 0.85 * max(0.0, math.sin(math.pi * (local_hour - 7) / 13))
    return 0.1


def _record(
    contract: Contract,
    seq: int,
    start_ns: int,
    rng: random.Random,
    slow: bool,
    failing: float,
    model: tuple[str, str],
) -> dict[str, Any]:
    roll = rng.random()
    status = "error" if roll < failing else "rejected" if roll < failing + 0.003 else "ok"
    l1 = int(rng.lognormvariate(math.log(1_500), 0.5))
    l2 = int(rng.lognormvariate(math.log(9_000), 0.45))
    l3 = int(rng.lognormvariate(math.log(210_000 if slow else 85_000), 0.2))
    tokens_in, tokens_out = rng.randint(60, 900), rng.randint(8, 160)
    experts = {}
    for layer in range(2):
        for expert in rng.sample(range(8), rng.randint(2, 4)):
            experts[(layer, expert)] = rng.randint(8, tokens_in + tokens_out)
    hits = rng.randint(0, 3)
    return make_record(
        agent_id=HISTORY_AGENT_ID,
        seq=seq,
        tenant=contract.tenant.code,
        contract=contract.code,
        package=contract.package.code,
        client_request_id=f"history-{seq}",
        model_id=model[0],
        weights_sha3=model[1],
        start_ns=start_ns,
        end_ns=start_ns + (l1 + l2 + l3) * 1_000 + 200_000,
        clock_drift_us=rng.randint(0, 40),
        tokens_in=tokens_in,
        tokens_out=tokens_out if status == "ok" else 0,
        sla_class=rng.choice(("gold", "standard", "batch")),
        hops=[
            {"layer": "L1", "node": "router-1", "latency_us": l1},
            {"layer": "L2", "node": rng.choice(("cache-1", "cache-2")), "latency_us": l2},
            {"layer": "L3", "node": "cpu-demo-1", "latency_us": l3},
        ],
        experts=[{"layer": lay, "expert": e, "tokens": t} for (lay, e), t in experts.items()],
        prefix_cache_hit_tokens=rng.randint(0, tokens_in // 3),
        expert_cache_hits=hits,
        expert_cache_misses=rng.randint(0, 2) + (0 if hits else 1),
        status=status,
    )
