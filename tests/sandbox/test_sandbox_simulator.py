"""The sandbox's traffic simulator (issue 19.3) sends each day's events as they fall due through the real
serving path — a real agent serving the tiny MoE, with the sandbox's own key — and its records, signed,
shipped and ingested, land in the sandbox's store only."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from django.test import override_settings
from django.utils import timezone
from fastapi.testclient import TestClient

from catalog.models import Capability, ComputePackage, PackageCapability
from clickhouse_store.queries.records import count_records
from clickhouse_store.queries.sandbox import sandbox_figures
from common.periods import month_bounds, month_of
from compute_agents.app import create_app
from sandbox.models import Sandbox
from sandbox.selectors import sandbox_metrics
from sandbox.services import open_sandbox
from sandbox.simulator import due_events, sample_inputs, simulate
from sandbox.tasks import simulate_traffic
from tests.compute_agents.agent_harness import start_agent
from tests.compute_agents.publisher import model_id_of
from tests.factories import ContractFactory, customer
from tests.sandbox.support import on_sale


@pytest.mark.usefixtures("clickhouse")
@pytest.mark.django_db(transaction=True)
def test_the_days_share_goes_through_the_real_agent_into_the_sandbox_only(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    review = ComputePackage.objects.create(code="review", name="Review", unit="review_event")
    capability = Capability.objects.create(
        code="clause-review",
        name="Clause review",
        engine=Capability.Engine.MOE,
        model_id=model_id_of(tiny_model),
        sla_timeout_ms=30_000,
        acceptance_rule="tokens_out >= 1",
    )
    PackageCapability.objects.create(package=review, capability=capability)
    on_sale(review, "10.00", "0.05")
    production = ContractFactory.create(package=review)
    harness = start_agent(live_server.url, tiny_model, tmp_path / "agent", [production])
    sandbox = open_sandbox(customer(production.tenant.code), ["review"], daily_events=240)
    harness.agent.entitlements.refresh()  # the sandbox's keys, as the agent's next refresh finds them
    now = timezone.now()
    Sandbox.objects.filter(pk=sandbox.pk).update(simulated_until=now - timedelta(hours=1))
    sandbox.refresh_from_db()
    assert due_events(sandbox, now) == 10  # an hour of 240 a day

    agent = cast(httpx.Client, TestClient(create_app(harness.agent.service)))  # an httpx client
    sent = simulate(sandbox, agent, now)
    assert (sent.events, sent.calls, sent.statuses) == (10, 10, {200: 10})
    assert harness.agent.shipper.drain() == 10
    sandbox.refresh_from_db()
    assert (sandbox.events_sent, sandbox.simulated_until) == (10, now)
    assert due_events(sandbox, now) == 0  # caught up

    month = month_bounds(month_of(now))
    assert sandbox_figures(production.tenant.code, sandbox.contract.code, *month).records == 10
    assert count_records(sandbox.contract.code, *month) == (0, 0)  # nothing in production's store
    metrics = sandbox_metrics(sandbox, now)
    assert (metrics.events, metrics.accepted, metrics.acceptance_rate) == (10, 10, Decimal(1))
    assert metrics.p50_ms > 0


@pytest.mark.django_db
def test_without_a_serving_path_nothing_is_sent_and_onnx_inputs_follow_the_declared_shapes() -> None:
    with override_settings(SANDBOX_SERVING_URL=""):
        assert simulate_traffic() == 0
    matrix = {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}
    schema = {
        "properties": {
            "x": {**matrix, "x-shape": [None, 3]},  # a free size: 1
            "flag": {"type": "boolean", "x-shape": []},
        }
    }
    assert sample_inputs(schema) == {"x": [[0.5, 0.5, 0.5]], "flag": True}
