"""`make run` end to end: the serving tree (a router and executors in two subtrees, real processes)
serves several tenants; the invoices come from their records; its burst makes the scheduler borrow and
scale."""

from __future__ import annotations

from decimal import Decimal
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from billing.models import Invoice
from catalog.models import HostCostProfile, PackagePlan
from clickhouse_store import query
from common.periods import month_bounds, month_of, previous_month
from demo.history import HISTORY_AGENT_ID
from package_factory.models import PackageBuild
from sandbox.models import Sandbox
from scheduling.models import SchedulerEvent
from sla.models import SlaReport

pytestmark = [
    pytest.mark.usefixtures("clickhouse", "own_data_dir"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def own_data_dir(settings: Any, tmp_path: Path) -> None:
    """Each test's `make run` keeps its agents' keys, spools and logs apart: in the test run's one data
    directory, one test's agents would ship the other's spooled records into its platform."""
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()


def test_run_demo_invoices_what_the_tree_served_and_its_burst_borrows_and_scales() -> None:
    """Eight requests through the tree, then the burst of batch requests: subtree batch borrows an
    executor of default and its autoscaler starts the replica slot; once quiet, the loan goes back and
    the replica stops. Every event reaches the platform; the requests a lent executor served are batch's,
    billed to the batch contract; every record is invoiced."""
    out = StringIO()
    call_command(
        "run_demo", *("--no-serve", "--port", "0", "--requests", "8", "--history-days", "0"), stdout=out
    )
    text = out.getvalue()
    assert "8 × HTTP 200, 1 × HTTP 400, 1 × HTTP 401" in text
    built = PackageBuild.objects.get(package__code="acme-claims")  # the package factory's demo package
    assert (built.tenant.code, built.package.owner, built.template) == (
        "acme-legal",
        built.tenant,
        "insurance-claim-documents",
    )
    assert "Package factory: acme-claims (acme-legal's own) built from the insurance-claim-documents" in text
    assert built.quote["formula"] in text
    rows = query.select(
        f"SELECT contract, count(), countIf(status = 'ok') FROM {query.RECORDS} "
        "WHERE NOT startsWith(client_request_id, 'burst-') AND NOT startsWith(client_request_id, 'review-') "
        "GROUP BY contract"
    )
    stored = {contract: (records, served) for contract, records, served in rows}
    # Keys cycle over acme (gold, standard), st-mary (gold), nova (batch); the malformed request is acme's.
    assert stored == {
        "acme-legal-review-2026": (5, 4),
        "st-mary-matching-2026": (2, 2),
        "nova-batch-2026": (2, 2),
    }
    invoices = {i.contract.code: i.record_count for i in Invoice.objects.select_related("contract")}
    everything = dict(query.select(f"SELECT contract, count() FROM {query.RECORDS} GROUP BY contract"))
    assert invoices == everything and everything["nova-batch-2026"] > 2  # the burst's records too
    assert "records all invoiced" in text
    # The composed package billed by business event: 8 contract reviews in 9 calls; review-0's only answer
    # is too short, review-4's second one is long enough.
    assert "Business events of acme-legal-review-2026: billable 7, failed acceptance 1, partial 0" in text
    acme = Invoice.objects.get(contract__code="acme-legal-review-2026")
    line = acme.lines.get(dimension="contract_review_event")
    assert (line.description, line.quantity, line.amount) == ("Contract review events", 7, Decimal("87.50"))
    assert sorted(e["event_id"] for e in line.details["events"]) == [f"review-{n}" for n in range(1, 8)]
    # The sandbox: its simulated events went through the tree into its own store, and it has no invoice.
    words = " ".join(text.split())  # as printed, lines wrapped at the console's width
    assert "the simulator sent 12 of its 1000 events a day through the L1 router" in words
    sandbox = Sandbox.objects.select_related("contract").get(tenant__code="acme-legal")
    [(sandboxed,)] = query.select(
        f"SELECT count() FROM {query.SANDBOX} WHERE contract = {{c:String}}", {"c": sandbox.contract.code}
    )
    assert sandboxed == 12 and sandbox.contract.code not in everything
    assert not Invoice.objects.filter(contract=sandbox.contract).exists()
    assert "Projected invoice" in words and "Sandbox figures of" in words
    # Through the tree: every served request is a v2 record of an executor, with the router's decision.
    [(routed, executors)] = query.select(
        f"SELECT countIf(v = 2), groupUniqArray(agent_id) FROM {query.RECORDS} "
        "WHERE status = 'ok' AND NOT startsWith(client_request_id, 'burst-') "
        "AND NOT startsWith(client_request_id, 'review-')"
    )
    assert routed == 8 and set(executors) <= {"demo-exec-a", "demo-exec-b", "demo-exec-c"}
    assert "Serving tree:" in text and "per domain (classifier):" in text and "hop latency per layer" in text
    events = list(SchedulerEvent.objects.order_by("at_ns"))
    kinds = [e.kind for e in events]
    assert {"borrow", "scale_up", "return", "scale_down"} <= set(kinds), text
    borrow = next(e for e in events if e.kind == "borrow")  # a slow machine may see another after it
    assert (borrow.subtree, borrow.lender) == ("batch", "default") and borrow.figures["periods"] >= 3
    assert borrow.executor in ("demo-exec-a", "demo-exec-b")
    returned = next(e for e in events if e.kind == "return" and e.at_ns > borrow.at_ns)
    assert returned.executor == borrow.executor and returned.at_ns - borrow.at_ns >= 10 * 10**9
    up = next(e for e in events if e.kind == "scale_up")
    assert up.subtree == "batch" and (up.figures["replicas"], up.figures["desired"]) == (1, 2)
    assert up.figures["p99_ms"] > 200
    assert "the replica demo-exec-d joined subtree batch" in text and "records all invoiced" in text
    lent = query.select(
        f"SELECT contract, JSONExtractString(decision, 'claims', 'subtree') FROM {query.RECORDS} "
        "WHERE agent_id = {agent:String} AND startsWith(client_request_id, 'burst-')",
        {"agent": borrow.executor},
    )
    assert lent and set(lent) == {("nova-batch-2026", "batch")}


def stored_contracts() -> set[str]:
    return {"acme-legal-review-2026", "st-mary-matching-2026", "nova-batch-2026"}


def test_run_demo_sends_its_history_once_with_terms_for_every_page() -> None:
    first = StringIO()
    call_command(
        "run_demo",
        *("--no-serve", "--port", "0", "--requests", "3", "--history-days", "3", "--burst", "0"),
        stdout=first,
    )
    [(history, history_ok)] = query.select(
        f"SELECT count(), countIf(status = 'ok') FROM {query.RECORDS} WHERE agent_id = {{agent:String}}",
        {"agent": HISTORY_AGENT_ID},
    )
    assert history > 100 and history_ok > 0.9 * history
    assert f"History (3 days before today): {history:,} records signed and ingested" in first.getvalue()
    packages = {
        "contract-review",
        "patient-matching",
        "batch-summaries",
        "acme-claims",
        "contract-review-events",
    }  # acme-claims: the factory's; contract-review-events: the package billed per event
    assert set(PackagePlan.objects.filter(active=True).values_list("package__code", flat=True)) == packages
    assert HostCostProfile.objects.filter(host_class="cpu-demo").exists()
    reports = SlaReport.objects.select_related("contract__package__sla_policy")
    assert {r.contract.package.sla_policy.objectives.count() for r in reports} == {4}
    assert sum(r.valid_count for r in reports) > 0
    start, end = month_bounds(previous_month(month_of(timezone.now())))
    rows = query.select(
        f"SELECT contract, count() FROM {query.RECORDS} "
        "WHERE start_time >= {start:DateTime64(9, 'UTC')} AND start_time < {end:DateTime64(9, 'UTC')} "
        "GROUP BY contract",
        {"start": start, "end": end},
    )
    in_closed_month = dict(rows)
    closed = Invoice.objects.filter(period_start=start, period_end=end).select_related("contract")
    assert {i.contract.code: (i.status, i.record_count) for i in closed} == {
        code: ("finalized", in_closed_month.get(code, 0)) for code in stored_contracts()
    }

    again = StringIO()
    call_command(
        "run_demo",
        *("--no-serve", "--port", "0", "--requests", "3", "--history-days", "3", "--burst", "0"),
        stdout=again,
    )
    assert "History (3 days before today): already ingested" in again.getvalue()
    [(after,)] = query.select(
        f"SELECT count() FROM {query.RECORDS} WHERE agent_id = {{agent:String}}", {"agent": HISTORY_AGENT_ID}
    )
    assert after == history
