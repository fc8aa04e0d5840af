"""The dependency watch: a customer's health URL (a real HTTP server on loopback) probed by the beat job
each minute on a driven clock; five consecutive minutes of failure open a `customer_dependency`
exclusion, which pauses billing of its window, is announced by webhook, and closes on recovery."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

from accounts.models import Role
from billing.services import generate_invoice
from common.periods import month_bounds
from contracts.models import Contract, ContractPrice
from ledger.models import LogBatch
from sla.models import CustomerDependency, DependencyCheck, Exclusion, ExclusionAppeal
from sla.tasks import watch_dependencies_task
from tests.billing.usage import send_each
from tests.factories import ContractFactory, MembershipFactory
from treemeter_records.timeutil import unix_nanos
from webhooks.models import WebhookEvent

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 10, 10, 0, tzinfo=UTC)


class Health:
    """A loopback health endpoint whose answer the test sets."""

    def __init__(self) -> None:
        self.status = 200
        health = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(health.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/health"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def health() -> Iterator[Health]:
    served = Health()
    yield served
    served.server.shutdown()
    served.server.server_close()


def member(contract: Contract, role: str) -> Client:
    user = MembershipFactory.create(
        tenant=contract.tenant, role=role, user__username=f"member-{role}-{contract.pk}"
    ).user
    client = Client()
    client.force_login(user)
    return client


def staff_client() -> Client:
    client = Client()
    staff, _ = get_user_model().objects.get_or_create(username="ops", defaults={"is_staff": True})
    client.force_login(staff)
    return client


def watched(health: Health, **contract: Any) -> Contract:
    c = ContractFactory.create(pause_billing_on_customer_dependency=True, **contract)
    response = staff_client().put(
        f"/v1/sla/dependencies/{c.code}",
        {"name": "Hospital HIS", "health_url": health.url},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    return c


def minutes(health: Health, statuses: list[int], start: datetime = T0) -> None:
    """One beat run per minute from `start`, the endpoint answering each status in turn; each run
    queues one probe per watched dependency."""
    for k, status in enumerate(statuses):
        health.status = status
        queued = watch_dependencies_task((start + timedelta(minutes=k)).isoformat())
        assert queued == CustomerDependency.objects.count()


def test_five_consecutive_minutes_of_failure_open_an_exclusion_and_recovery_closes_it(health: Health) -> None:
    c = watched(health)
    # 10:00 healthy; 503 from 10:01; at 10:05 the failures span 4 minutes: nothing yet.
    minutes(health, [200, 503, 503, 503, 503, 503])
    assert not Exclusion.objects.exists()
    assert DependencyCheck.objects.filter(healthy=False).count() == 5

    minutes(health, [503], T0 + timedelta(minutes=6))  # 10:01 → 10:06: five minutes
    [opened] = Exclusion.objects.all()
    assert (opened.kind, opened.scope, opened.closed) == ("customer_dependency", "all", False)
    assert (opened.starts_at, opened.ends_at) == (T0 + timedelta(minutes=1), T0 + timedelta(minutes=6))
    assert opened.declared_by is None and opened.detected_by is not None
    assert "Hospital HIS" in opened.reason and "detected automatically" in opened.reason

    minutes(health, [503, 500], T0 + timedelta(minutes=7))  # each failure extends the window
    assert Exclusion.objects.get().ends_at == T0 + timedelta(minutes=8)
    minutes(health, [200, 200], T0 + timedelta(minutes=9))  # the first healthy check closes it there
    closed = Exclusion.objects.get()
    assert (closed.closed, closed.ends_at) == (True, T0 + timedelta(minutes=9))

    events = WebhookEvent.objects.filter(type="customer_dependency.outage").order_by("id")
    assert [(e.payload["action"], e.payload["ends_at"]) for e in events] == [
        ("opened", (T0 + timedelta(minutes=6)).isoformat()),
        ("closed", (T0 + timedelta(minutes=9)).isoformat()),
    ]
    assert {e.tenant_id for e in events} == {c.tenant_id} and events[0].payload["billing_paused"] is True


def test_a_gap_or_a_healthy_check_breaks_the_run(health: Health) -> None:
    watched(health)
    minutes(health, [503, 503, 503])  # 10:00 – 10:02
    minutes(health, [503, 503, 503], T0 + timedelta(minutes=5))  # 10:05 – 10:07: 3 minutes after a gap
    minutes(health, [200], T0 + timedelta(minutes=8))
    minutes(health, [503, 503, 503, 503, 503], T0 + timedelta(minutes=9))  # 10:09 – 10:13: 4 minutes

    assert not Exclusion.objects.exists()


def test_an_unreachable_dependency_fails_its_checks(health: Health) -> None:
    c = watched(health)
    health.server.shutdown()
    health.server.server_close()
    for k in range(6):
        watch_dependencies_task((T0 + timedelta(minutes=k)).isoformat())

    [exclusion] = Exclusion.objects.filter(contract=c)
    assert exclusion.starts_at == T0
    assert DependencyCheck.objects.filter(status_code__isnull=True).exclude(error="").count() == 6


@pytest.mark.usefixtures("clickhouse")
def test_billing_leaves_the_outage_out_and_the_invoice_says_so(health: Health) -> None:
    c = watched(health)
    ContractPrice.objects.create(contract=c, dimension="requests", unit_price=Decimal("1.00"))
    minutes(health, [200, *[503] * 8, 200])  # an outage from 10:01 to 10:09
    inside, outside = T0 + timedelta(minutes=3), T0 + timedelta(hours=2)
    send_each(c, [{"start_ns": unix_nanos(inside)}] * 4 + [{"start_ns": unix_nanos(outside)}] * 3)

    invoice = generate_invoice(c.pk, *month_bounds("2026-11"), now=datetime(2026, 12, 2, tzinfo=UTC))

    assert invoice.lines.get(dimension="requests").quantity == 3  # the 4 in the outage are not billed
    statement = invoice.terms["exclusions"]
    assert (statement["by_sla_pause"], statement["records"]) == (4, 4)
    [window] = statement["sla_exclusions"]
    assert (window["starts_at"], window["ends_at"]) == (
        (T0 + timedelta(minutes=1)).isoformat(),
        (T0 + timedelta(minutes=9)).isoformat(),
    )


def test_customers_see_their_own_dependencies_and_outages_only(health: Health) -> None:
    mine, theirs = watched(health), watched(health)
    minutes(health, [503] * 6)
    member = MembershipFactory.create(tenant=mine.tenant).user
    client = Client()
    client.force_login(member)

    listed = client.get("/v1/sla/dependencies").json()
    outages = client.get("/v1/sla/exclusions").json()

    assert [d["contract"] for d in listed] == [mine.code]
    assert (listed[0]["state"], listed[0]["failing_since"]) == (
        "outage",
        T0.isoformat().replace("+00:00", "Z"),
    )
    assert listed[0]["open_exclusion"] == Exclusion.objects.get(contract=mine).pk
    rows = outages["results"] if isinstance(outages, dict) else outages
    assert [(x["contract"], x["detected_by"], x["declared_by"]) for x in rows] == [
        (mine.code, "Hospital HIS", None)
    ]
    assert theirs.code not in str(listed) + str(outages)
    assert (
        client.put(
            f"/v1/sla/dependencies/{mine.code}",
            {"name": "x", "health_url": health.url},
            content_type="application/json",
        ).status_code
        == 403
    )  # only staff set what is watched


@override_settings(WEBHOOK_ALLOW_PRIVATE_URLS=False)
def test_a_health_url_on_a_private_address_is_refused() -> None:
    c = ContractFactory.create()
    response = staff_client().put(
        f"/v1/sla/dependencies/{c.code}",
        {"name": "Metadata", "health_url": "http://169.254.169.254/latest"},
        content_type="application/json",
    )
    missing = staff_client().put(
        "/v1/sla/dependencies/no-such-contract",
        {"name": "HIS", "health_url": "https://his.example/health"},
        content_type="application/json",
    )

    assert (response.status_code, response.json()["code"]) == (400, "unsafe_webhook_url")
    assert (missing.status_code, missing.json()["code"]) == (404, "unknown_contract")


@pytest.mark.usefixtures("clickhouse")
def test_an_appeal_packages_the_windows_raw_batch_hashes(health: Health) -> None:
    c = watched(health)
    minutes(health, [*[503] * 6, 200])  # an outage from 10:00 to 10:06
    send_each(c, [{"start_ns": unix_nanos(T0 + timedelta(minutes=2))}] * 3)  # one batch in the window
    send_each(c, [{"start_ns": unix_nanos(T0 + timedelta(hours=1))}] * 2)  # one after it
    outage = Exclusion.objects.get(contract=c)
    billing = member(c, Role.BILLING)
    url = f"/v1/sla/exclusions/{outage.pk}/appeal"
    reason = {"reason": "Our HIS answered; your probe had the wrong port."}

    not_text = billing.post(url, {"reason": 0}, content_type="application/json")
    opened = billing.post(url, reason, content_type="application/json")
    again = billing.post(url, reason, content_type="application/json")
    read_only = member(c, Role.READ_ONLY).post(url, reason, content_type="application/json")
    other = member(ContractFactory.create(), Role.BILLING).post(url, reason, content_type="application/json")
    staff = staff_client().post(url, reason, content_type="application/json")

    assert not_text.status_code == 400  # a reason is text, never a number made into one
    assert opened.status_code == 201, opened.content
    evidence = opened.json()["evidence"]
    [batch] = LogBatch.objects.filter(leaves__start_ns__lt=unix_nanos(outage.ends_at)).distinct()
    assert evidence["batches"] == [
        {"agent_id": batch.agent.agent_id, "body_sha256": batch.body_sha256, "first_seq": 0, "last_seq": 2}
    ]
    assert evidence["records"] == 3 and len(evidence["checks"]) == 7  # 10:00 … 10:06
    assert [c["healthy"] for c in evidence["checks"]] == [False] * 6 + [True]
    assert [(r.status_code, r.json()["code"]) for r in (again, read_only, other, staff)] == [
        (409, "appeal_open"),
        (403, "forbidden_role"),
        (404, "unknown_exclusion"),
        (403, "customers_only"),
    ]
    assert ExclusionAppeal.objects.get().opened_by.username.startswith("member-")
