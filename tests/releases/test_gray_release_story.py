"""The design's three-stage gray release over real services (PostgreSQL, ClickHouse via chDB, records
through the real ingest): day 1 OCR only, capped; day 2 clause extraction, where an F1 of 0.71 fails the
gate, holds the stage and tells the customer by webhook; after the fix F1 ≥ 0.92 passes and the stage
is promoted automatically; day 3 everything, billed. The gray usage of days 1 and 2 is on the invoice
at zero price."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client

from accounts.access import principal_of
from contracts.models import ContractPrice
from entitlements.selectors import entitlement_snapshot
from entitlements.services import issue_api_key
from releases.models import GateEvaluation, ReleasePlan, ReleaseStage
from releases.services import evaluate_release_gates, promote_plan
from tests.api.conftest import staff_client, token_client
from tests.factories import signing_agent
from tests.ledger.support import november_invoice, send
from tests.releases.gray_story import DAY_1, DAY_2, DAY_3, calls, review_contract, three_stages
from webhooks.models import WebhookDelivery, WebhookEndpoint, WebhookEvent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


def stage_statuses(plan: ReleasePlan) -> list[str]:
    return list(plan.stages.order_by("position").values_list("status", flat=True))


def test_three_stages_a_failing_gate_holds_and_tells_the_customer_then_a_passing_one_promotes() -> None:
    contract = review_contract()
    ContractPrice.objects.create(contract=contract, dimension="requests", unit_price=Decimal("0.05"))
    endpoint = WebhookEndpoint.objects.create(tenant=contract.tenant, url="https://hooks.acme.test/tm")
    issue_api_key(contract_code=contract.code)
    agent = signing_agent(contract)
    customer = token_client(contract.tenant)
    ingest = Client()

    # Day 1: OCR only, capped at 100 calls an hour, billing off.
    plan = three_stages(contract)
    [key] = entitlement_snapshot(agent.key_row)["keys"]
    assert key["release"] == {
        "plan": "acme-review-launch",
        "stage": 1,
        "models": [{"model_id": "acme-review/ocr", "hourly_cap": 100, "plan_hourly_cap": 100}],
    }
    send(ingest, agent, calls(agent, contract, "ocr", DAY_1 + timedelta(hours=9), 100))
    answer = customer.get(f"/v1/releases/{plan.code}").json()
    assert (answer["current_stage"], answer["stages"][0]["status"]) == (1, "active")

    # The customer promotes day 1 by hand (its gate asks nothing): day 2 is in force.
    promote_plan(plan=plan, principal=principal_of(_request(customer)), now=DAY_2)
    assert stage_statuses(plan) == ["passed", "active", "pending"]
    [key] = entitlement_snapshot(agent.key_row)["keys"]
    assert [m["model_id"] for m in key["release"]["models"]] == ["acme-review/clauses", "acme-review/ocr"]

    # Day 2: the dialect problem, F1 0.71 on 25 calls: the gate fails, the stage is held, a webhook.
    send(ingest, agent, calls(agent, contract, "ocr", DAY_2 + timedelta(hours=1), 10))
    failing = calls(agent, contract, "clauses", DAY_2 + timedelta(hours=1), 25, outcome={"f1": "0.71"})
    send(ingest, agent, failing)
    assert evaluate_release_gates(DAY_2 + timedelta(hours=2)) == {plan.code: "failed"}
    stage = plan.stages.get(position=2)
    assert (stage.status, stage.holds, stage.window_started_at) == ("held", 1, DAY_2 + timedelta(hours=2))
    event = WebhookEvent.objects.get(type="release.stage_held")
    assert event.tenant == contract.tenant and event.event_id == f"release.stage_held:{stage.pk}:1"
    assert event.payload["stage"] == {"position": 2, "name": "Day 2: clause extraction, verified", "holds": 1}
    assert event.payload["gate"]["reason"] == "below_threshold"
    assert event.payload["gate"]["capabilities"] == [
        {
            "capability": "acme-review-clauses",
            "model_id": "acme-review/clauses",
            "rule": "outcome_f1 >= 0.92",
            "calls": 25,
            "accepted": 0,
            "acceptance": "0.0000",
            "holds": False,
        }
    ]
    assert WebhookDelivery.objects.filter(event=event, endpoint=endpoint).count() == 1

    # Promotion by hand is refused: the customer's (automatic stage) and staff's (the gate fails).
    refused = customer.post(f"/v1/releases/{plan.code}/promote")
    assert (refused.status_code, refused.json()["code"]) == (409, "promotion_automatic")
    refused = staff_client().post(f"/v1/releases/{plan.code}/promote")
    assert (refused.status_code, refused.json()["code"]) == (409, "gate_not_passed")
    assert refused.json()["details"]["gate"]["verdict"] == "failed"

    # The fix: F1 ≥ 0.92 on the calls after the hold; the gate holds and day 3 is in force.
    fixed = calls(agent, contract, "clauses", DAY_2 + timedelta(hours=3), 24, outcome={"f1": "0.95"})
    fixed += calls(
        agent, contract, "clauses", DAY_2 + timedelta(hours=3, minutes=5), 1, outcome={"f1": "0.92"}
    )
    send(ingest, agent, fixed)
    assert evaluate_release_gates(DAY_2 + timedelta(hours=4)) == {plan.code: "passed"}
    assert stage_statuses(plan) == ["passed", "passed", "active"]
    verdicts = GateEvaluation.objects.filter(stage=stage).order_by("evaluated_at")
    assert [(v.verdict, v.figures["capabilities"][0]["acceptance"]) for v in verdicts] == [
        ("failed", "0.0000"),
        ("passed", "1.0000"),
    ]

    # Day 3: everything, billing on.
    send(ingest, agent, calls(agent, contract, "ocr", DAY_3 + timedelta(hours=9), 10))
    send(
        ingest,
        agent,
        calls(agent, contract, "clauses", DAY_3 + timedelta(hours=9), 10, outcome={"f1": "0.95"}),
    )
    invoice = november_invoice(contract)
    [line] = invoice.lines.filter(dimension="requests")
    assert (line.quantity, line.amount) == (Decimal(20), Decimal("1.00"))
    excluded = invoice.terms["exclusions"]
    assert (excluded["records"], excluded["by_gray_release"], excluded["by_dispute"]) == (160, 160, 0)
    assert [(w["stage"], w["reason"], w["package"]) for w in excluded["gray_release"]] == [
        (1, "gray_release", "acme-review-pkg"),
        (2, "gray_release", "acme-review-pkg"),
    ]
    assert excluded["gray_release"][1]["ends_at"] == (DAY_2 + timedelta(hours=4)).isoformat()


def _request(client: Client) -> object:
    """The principal a client's token acts as, by a request it makes."""
    return client.get("/v1/releases").wsgi_request


def test_a_stage_whose_time_is_up_without_enough_calls_is_held() -> None:
    contract = review_contract("late-review")
    plan = three_stages(contract)
    promote_plan(plan=plan, principal=principal_of(_request(staff_client())), now=DAY_2)
    assert evaluate_release_gates(DAY_2 + timedelta(hours=23)) == {plan.code: "pending"}
    assert evaluate_release_gates(DAY_2 + timedelta(hours=24)) == {plan.code: "failed"}
    stage = plan.stages.get(position=2)
    assert stage.status == ReleaseStage.Status.HELD
    assert WebhookEvent.objects.get(type="release.stage_held").payload["gate"]["reason"] == "not_enough_calls"
