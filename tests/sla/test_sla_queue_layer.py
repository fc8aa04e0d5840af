"""The queue wait is its own measured hop: a queued job's signed decision carries `queued_us` (the
router's receipt of the request to the job's dispatch), ClickHouse materialises it as
`queue_latency_us`, and SLA objectives on layer `queue` count it like any other layer's latency.
Real signed v2 records (router + executor keys) through the real ingest path; hand-computed figures."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.test import Client

from clickhouse_store.queries import sla as sla_sql
from contracts.models import Contract
from ingest.outbox import store_pending
from sla.models import Objective, SlaPolicy, SlaReport
from sla.openslo import export_policy, import_policy
from sla.pdf import render_report_pdf
from sla.services import compute_report
from tests.factories import ContractFactory, SigningAgent, signing_agent
from tests.frontend.support import member
from tests.pdf_text import pdf_text
from tests.sla.helpers import make_policy
from treemeter_records import protocol, sign_record
from usage.selectors import latency_objectives

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
AFTER_NOV = datetime(2026, 12, 2, tzinfo=UTC)
NODE = "l1.00112233445566ff"
START_NS = int(datetime(2026, 11, 15, tzinfo=UTC).timestamp()) * 10**9
L1_IN_US = 1_000
# Ten queued jobs' waits in µs; the objective allows 60 000 ms = 60 000 000 µs (≤: the 8th is good).
WAITS_US = [
    1_500,
    250_000,
    2_000_000,
    15_000_000,
    30_000_000,
    45_250_500,
    59_999_999,
    60_000_000,
    60_000_001,  # 1 µs over: bad
    300_000_000,  # bad
]


@pytest.fixture
def tree() -> dict[str, Any]:
    contract = ContractFactory.create()
    return {
        "contract": contract,
        "executor": signing_agent(contract, agent_id="exec-q"),
        "router": signing_agent(contract, agent_id="l1-q", kind="router"),
    }


def _queue_policy(contract: Contract, *, availability: str | None = None) -> SlaPolicy:
    """p99-like for the queue: 90 % of the served requests wait at most 60 000 ms."""
    policy = make_policy(contract, availability=availability)
    Objective.objects.create(
        policy=policy,
        name="queue-wait",
        kind="latency",
        layer="queue",
        threshold_ms=Decimal(60_000),
        target_percent=Decimal(90),
    )
    return policy


def _routed(
    executor: SigningAgent,
    router: SigningAgent,
    contract: Contract,
    k: int,
    queued_us: int | None,
    **fields: Any,
) -> dict[str, Any]:
    """The k-th request the router received (at START_NS + k s), queued `queued_us` before its dispatch
    (None: interactive, no claim), signed by the router (decision) and by the executor (record)."""
    receipt = START_NS + k * 10**9
    dispatched = receipt + (L1_IN_US + (queued_us or 0)) * 1000
    record = executor.record(
        contract,
        start_ns=receipt,
        end_ns=dispatched + 100_000_000,
        hops=[
            {"layer": "L1", "node": NODE, "latency_us": 1_200},
            {"layer": "L3", "node": f"{executor.agent_id}.l3", "latency_us": 90_000},
            {"layer": "L1", "node": NODE, "latency_us": 300},
        ],
        **fields,
    )
    claims = {
        "record_id": record["record_id"],
        "router": router.agent_id,
        "node": NODE,
        "rules_sha256": "00112233445566ff" * 4,
        "domain": "contract_review",
        "confidence_ppm": 930_000,
        "l2_confirmation": False,
        "path": ["L1", "L3", "L1"],
        "subtree": "legal",
        "executor": executor.agent_id,
        "preheat": [],
        "l1_in_us": L1_IN_US,
        # start_ns == decided_ns - (l1_in_us + queued_us) * 1000: the record starts at the receipt
        "decided_ns": dispatched,
        **({"queued_us": queued_us} if queued_us is not None else {}),
    }
    return sign_record(record, protocol.sign_decision(router.key, claims), executor.key)


def _ingest(agent: SigningAgent, records: list[dict[str, Any]]) -> None:
    response = Client().post(
        "/v1/ingest/batches", data=agent.batch(records).body(), content_type="application/x-ndjson"
    )
    assert response.status_code == 200, response.content
    assert response.json()["accepted"] == len(records), response.content


def _queued(tree: dict[str, Any], first: int = 0) -> list[dict[str, Any]]:
    executor, router, contract = tree["executor"], tree["router"], tree["contract"]
    return [_routed(executor, router, contract, first + k, wait) for k, wait in enumerate(WAITS_US)]


def _interactive(tree: dict[str, Any], count: int, first: int) -> list[dict[str, Any]]:
    executor, router, contract = tree["executor"], tree["router"], tree["contract"]
    return [_routed(executor, router, contract, first + k, None) for k in range(count)]


def _queue_objective(report: SlaReport) -> dict[str, Any]:
    (objective,) = [o for o in report.objectives if o["name"] == "queue-wait"]
    return objective


def test_the_queue_objective_counts_each_jobs_wait(tree: dict[str, Any]) -> None:
    _queue_policy(tree["contract"])
    _ingest(tree["executor"], _queued(tree))

    report = compute_report(tree["contract"], "2026-11", now=AFTER_NOV)

    objective = _queue_objective(report)
    assert (objective["layer"], objective["threshold_ms"], objective["unit"]) == (
        "queue",
        "60000.000",
        "requests",
    )
    assert (objective["eligible"], objective["good"], objective["bad"]) == (10, 8, 2)
    assert objective["measured_percent"] == "80.0000"
    assert objective["met"] is False
    assert objective["error_budget"] == "1.0000"  # 10 % of 10 requests
    assert objective["budget_spent_percent"] == "200.0000"  # 2 bad of a 1-request budget
    # quantileExact takes the element at floor(q·n) of the 10 sorted waits: index 5, then 9.
    assert report.percentiles_ms["queue"] == {
        "0.5": "45250.5",
        "0.9": "300000",
        "0.95": "300000",
        "0.99": "300000",
        "0.999": "300000",
    }
    assert report.terms["objectives"][0]["layer"] == "queue"


def test_interactive_requests_wait_zero_and_meet_the_queue_objective(tree: dict[str, Any]) -> None:
    _queue_policy(tree["contract"])
    _ingest(tree["executor"], _interactive(tree, 10, first=0))
    # v1 records have no decision at all: no queue either.
    _ingest(tree["executor"], [tree["executor"].record(tree["contract"], start_ns=START_NS + 50 * 10**9)])

    report = compute_report(tree["contract"], "2026-11", now=AFTER_NOV)

    objective = _queue_objective(report)
    assert (objective["eligible"], objective["good"], objective["measured_percent"]) == (11, 11, "100.0000")
    assert objective["met"] is True
    assert report.percentiles_ms["queue"] == {q: "0" for q in sla_sql.QUANTILES}
    assert report.percentiles_ms["l3"]["0.5"] == "90"  # the other layers as before


def test_queued_and_interactive_together_meet_exactly_the_target(tree: dict[str, Any]) -> None:
    _queue_policy(tree["contract"], availability="99.9")
    executor, router, contract = tree["executor"], tree["router"], tree["contract"]
    failed = _routed(executor, router, contract, 40, 500_000_000, status="error")
    _ingest(executor, _queued(tree) + _interactive(tree, 10, first=20) + [failed])

    report = compute_report(contract, "2026-11", now=AFTER_NOV)

    availability, objective = report.objectives
    assert (availability["eligible"], availability["good"]) == (21, 20)
    # A failed job is charged to availability only, however long it waited: 18 good of 20 served.
    assert (objective["eligible"], objective["good"], objective["bad"]) == (20, 18, 2)
    assert (objective["measured_percent"], objective["met"]) == ("90.0000", True)  # exactly the target
    # 10 zeros, then the 10 waits: indexes 10, 18, 19, 19, 19 of the sorted 20.
    assert report.percentiles_ms["queue"] == {
        "0.5": "1.5",
        "0.9": "60000.001",
        "0.95": "300000",
        "0.99": "300000",
        "0.999": "300000",
    }
    day = next(d for d in report.daily if d["day"] == "2026-11-15")
    assert day["objectives"]["queue-wait"] == {"eligible": 20, "good": 18, "percent": "90.0000"}
    # e2e starts at the receipt, so a queued job's end-to-end latency includes its wait.
    assert report.percentiles_ms["e2e"]["0.999"] == str(Decimal(300_000_000 + L1_IN_US + 100_000) / 1000)


def test_page_pdf_and_api_show_the_queue_percentiles_alike(tree: dict[str, Any]) -> None:
    _queue_policy(tree["contract"])
    _ingest(tree["executor"], _queued(tree))
    report = compute_report(tree["contract"], "2026-11", now=AFTER_NOV)
    queue = report.percentiles_ms["queue"]

    api = member(report.contract.tenant).get(f"/v1/sla/reports/{report.pk}").json()
    assert api["percentiles_ms"]["queue"] == queue
    assert set(api["percentiles_ms"]) == {"e2e", "l1", "l2", "l3", "queue"}
    assert [(o["name"], o["layer"]) for o in api["objectives"]] == [("queue-wait", "queue")]

    page = member(report.contract.tenant).get(f"/sla-reports/{report.pk}").content.decode()
    assert "<tr><td>Queue wait</td>" + "".join(f'<td class="num">{queue[q]}</td>' for q in queue) in page
    assert "<td>queue-wait</td><td>Queue wait</td>" in page
    chinese = member(report.contract.tenant, language="zh-hans").get(f"/sla-reports/{report.pk}")
    assert "<td>排队等待</td>" in chinese.content.decode()

    text = pdf_text(render_report_pdf(SlaReport.objects.get(pk=report.pk), "en"))
    assert "\nqueue\n" + "\n".join(queue.values()) + "\n" in text  # the percentiles table's queue row
    assert "\nqueue-wait\nqueue\n60000.000\n90.0000\n80.0000\n8 / 10\n" in text


def test_burn_rate_windows_count_the_queue_like_the_report(tree: dict[str, Any]) -> None:
    _ingest(tree["executor"], _queued(tree))
    store_pending()
    now = datetime.fromtimestamp(START_NS / 10**9, UTC) + timedelta(minutes=5)
    contract = tree["contract"]
    counts = sla_sql.window_counts(
        [contract.tenant.code],
        [contract.code],
        [sla_sql.Indicator(layer="queue", threshold_us=60_000_000)],
        [timedelta(hours=1)],
        now,
        [],
    )
    assert counts == {contract.code: [{timedelta(hours=1): (10, 8)}]}


def test_an_availability_objective_is_never_on_the_queue(tree: dict[str, Any]) -> None:
    policy = make_policy(tree["contract"], availability=None)
    wrong = Objective(policy=policy, name="queue-up", kind="availability", layer="queue", target_percent=99)
    with pytest.raises(ValidationError, match="end to end"):
        wrong.full_clean()
    with pytest.raises(IntegrityError), transaction.atomic():
        wrong.save()
    latency = Objective(
        policy=policy,
        name="queue-wait",
        kind="latency",
        layer="queue",
        threshold_ms=Decimal(60_000),
        target_percent=90,
    )
    latency.full_clean()  # a latency objective may be on the queue


def test_openslo_round_trips_a_queue_objective(tree: dict[str, Any]) -> None:
    policy = _queue_policy(tree["contract"])
    text = export_policy(policy)
    assert "layer: queue" in text
    (imported,) = import_policy(policy, text)
    assert (imported.kind, imported.layer, imported.threshold_ms, imported.target_percent) == (
        "latency",
        "queue",
        Decimal(60_000),
        Decimal(90),
    )


def test_the_usage_dashboard_lists_a_queue_objective(tree: dict[str, Any]) -> None:
    # The dashboard's latency chart has no queue series yet (its hourly rollup keeps no queue
    # quantiles); the objective is still listed, under its own layer name, rather than failing.
    _queue_policy(tree["contract"])
    assert latency_objectives([tree["contract"]]) == [
        {
            "policy": f"SLA {tree['contract'].code}",
            "objective": "queue-wait",
            "layer": "queue",
            "threshold_ms": "60000.000",
            "target_percent": "90.0000",
            "contracts": [tree["contract"].code],
        }
    ]
