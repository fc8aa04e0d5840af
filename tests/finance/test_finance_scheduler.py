"""The scheduler page: the routers' stored scheduler events as a filtered, paginated table, newest first,
a chart per subtree drawn from the stored figures, and downloads that parse back to the rows shown."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from agents.models import Agent
from agents.services import register_agent
from finance import scheduler
from scheduling.models import SchedulerEvent
from scheduling.services import EventInput, record_scheduler_events
from tests.billing.usage import ingest, routed_record
from tests.factories import ContractFactory, TenantFactory, signing_agent
from tests.finance.support import csv_rows, owner_client, parquet_table, shown_as_csv, staff_client
from treemeter_records import new_record_id, private_key_from_seed, public_key_to_b64

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
START = datetime(2026, 11, 3, 8, tzinfo=UTC)
URL = "/finance/scheduler/"


def ns(instant: datetime) -> int:
    return int((instant - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1)) * 1000 + 7


def _router(agent_id: str = "l1-router") -> Agent:
    key = private_key_from_seed(os.urandom(32))
    register_agent(
        agent_id=agent_id, public_key_b64=public_key_to_b64(key), tenant_codes=[], kind=Agent.Kind.ROUTER
    )
    return Agent.objects.get(agent_id=agent_id)


def scaling(at: datetime, subtree: str, desired: int, replicas: int) -> EventInput:
    kind = "scale_up" if desired > replicas else "scale_down"
    return EventInput(
        id=new_record_id(),
        kind=kind,
        at_ns=ns(at),
        subtree=subtree,
        reason=f"p99 against 300 ms: {replicas} → {desired} replicas",
        figures={"p99_ms": 300.0 + desired, "replicas": float(replicas), "desired": float(desired)},
    )


def move(at: datetime, kind: str, borrower: str, lender: str, executors: list[str]) -> EventInput:
    return EventInput(
        id=new_record_id(),
        kind=kind,
        at_ns=ns(at),
        subtree=borrower,
        reason=f"{kind} of {len(executors)} executors",
        figures={"load": 0.95, "executors": float(len(executors))},
        executor=",".join(executors),
        lender=lender,
    )


@pytest.fixture
def events() -> list[EventInput]:
    """On 3 November, 52 scaling steps of `finance` a minute apart, a borrow and a return; on 4 November,
    two scaling steps of `batch` from another router: 56 events."""
    finance = [
        scaling(START + timedelta(minutes=i), "finance", 2 + i % 5, 2 + (i + 1) % 5) for i in range(52)
    ]
    finance += [
        move(START + timedelta(minutes=10, seconds=30), "borrow", "finance", "batch", ["b-1", "b-2"]),
        move(START + timedelta(minutes=40, seconds=30), "return", "finance", "batch", ["b-1", "b-2"]),
    ]
    batch = [scaling(START + timedelta(days=1, hours=h), "batch", 3 + h, 2 + h) for h in range(2)]
    record_scheduler_events(router=_router(), events=finance)
    record_scheduler_events(router=_router("l1-second"), events=batch)
    return finance + batch


def _page(client: Client, url: str) -> tuple[Any, str]:
    response = client.get(url)
    assert response.status_code == 200, response.content[:500]
    return response, response.content.decode()


def _json_script(html: str, element_id: str) -> Any:
    found = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', html, re.S)
    assert found is not None, element_id
    return json.loads(found[1])


@pytest.fixture
def with_echarts(settings: Any, tmp_path: Path) -> None:
    """ECharts where the settings look for it (npm installs the real one; its content is not read here)."""
    (tmp_path / "echarts.min.js").write_text("/* echarts */\n")
    settings.STATICFILES_DIRS = [("vendor/echarts", str(tmp_path))]


def test_staff_see_the_newest_events_first_fifty_a_page(events: list[EventInput]) -> None:
    client = staff_client()
    response, html = _page(client, URL)
    table = response.context["table"]
    assert len(table.rows) == scheduler.PAGE_SIZE == 50
    newest_first = sorted(events, key=lambda e: e.at_ns, reverse=True)
    assert [r["event_id"] for r in table.rows] == [e.id for e in newest_first[:50]]
    assert html.count('data-testid="finance-scheduler-row"') == 50
    assert 'data-testid="finance-scheduler-filters"' in html
    assert 'data-testid="finance-nav-scheduler"' in html and 'aria-current="page"' in html
    assert "page 1 of 2, 56 events" in html
    assert 'data-testid="finance-scheduler-previous"' not in html
    assert 'href="?page=2" rel="next"' in html

    first = table.rows[0]
    assert (first["kind"], first["subtree"], first["router"]) == ("scale_up", "batch", "l1-second")
    assert first["figures"] == "desired=4.0, p99_ms=304.0, replicas=3.0"
    assert first["at"] == START + timedelta(days=1, hours=1) and first["at"].utcoffset() == timedelta(0)

    response, html = _page(client, f"{URL}?page=2")
    assert [r["event_id"] for r in response.context["table"].rows] == [e.id for e in newest_first[50:]]
    assert "page 2 of 2, 56 events" in html
    assert 'href="?page=1" rel="prev"' in html and 'data-testid="finance-scheduler-next"' not in html


def test_the_filters_narrow_the_rows_and_the_pager_keeps_them(events: list[EventInput]) -> None:
    client = staff_client()

    def ids(url: str) -> list[str]:
        return [r["event_id"] for r in client.get(url).context["table"].rows]

    assert set(ids(f"{URL}?subtree=batch")) == {e.id for e in events[-2:]}
    assert ids(f"{URL}?subtree=nothing-here") == []
    borrows = ids(f"{URL}?kind=borrow")
    assert borrows == [e.id for e in events if e.kind == "borrow"]
    assert set(ids(f"{URL}?from=2026-11-04")) == {e.id for e in events[-2:]}
    assert set(ids(f"{URL}?from=2026-11-03&to=2026-11-03&page=2")) == {
        e.id for e in sorted(events[:-2], key=lambda e: e.at_ns, reverse=True)[50:]
    }
    assert ids(f"{URL}?to=2026-11-02") == []
    _, html = _page(client, f"{URL}?subtree=finance&kind=scale_up")
    scale_ups = sum(e.kind == "scale_up" and e.subtree == "finance" for e in events)
    assert f"page 1 of 1, {scale_ups} events" in html
    assert 'value="finance"' in html and '<option value="scale_up" selected>' in html
    _, html = _page(client, f"{URL}?subtree=finance&from=2026-11-01")
    assert 'href="?subtree=finance&amp;from=2026-11-01&amp;page=2" rel="next"' in html
    assert "page 1 of 2, 54 events" in html
    # Past the last page: the last page.
    assert client.get(f"{URL}?page=9").context["pager"].number == 2


def test_the_chart_data_is_the_stored_figures_per_subtree(
    events: list[EventInput], with_echarts: None
) -> None:
    _, html = _page(staff_client(), URL)
    assert '<script src="/static/vendor/echarts/echarts.min.js"></script>' in html
    assert '<script src="/static/finance/scheduler.js"></script>' in html
    assert "finance-scheduler-charts-unavailable" not in html
    assert html.count('data-testid="finance-scheduler-chart"') == 2
    chart = _json_script(html, "scheduler-chart-data")
    assert chart["truncated"] is False and chart["limit"] == scheduler.CHART_MAX
    by_subtree = {series["subtree"]: series for series in chart["subtrees"]}
    assert list(by_subtree) == ["batch", "finance"]

    stored = SchedulerEvent.objects.order_by("at_ns")
    for name, series in by_subtree.items():
        rows = [row for row in stored if row.subtree == name]
        assert series["desired"] == [
            [row.at_ns // 1_000_000, row.figures["desired"], row.kind]
            for row in rows
            if row.kind in ("scale_up", "scale_down")
        ]
        for kind in ("borrow", "return"):
            assert series[kind] == [
                [row.at_ns // 1_000_000, row.figures["executors"], row.lender, row.executor]
                for row in rows
                if row.kind == kind
            ]
    finance = by_subtree["finance"]
    assert len(finance["desired"]) == 52 and finance["borrow"] == [
        [ns(START + timedelta(minutes=10, seconds=30)) // 1_000_000, 2.0, "batch", "b-1,b-2"]
    ]
    text = _json_script(html, "scheduler-chart-text")
    assert text["desired"] == "Desired replicas"


def test_the_chart_of_a_filtered_page_and_of_too_many_events(
    events: list[EventInput], with_echarts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = staff_client()
    _, html = _page(client, f"{URL}?subtree=batch")
    chart = _json_script(html, "scheduler-chart-data")
    assert [s["subtree"] for s in chart["subtrees"]] == ["batch"]
    assert len(chart["subtrees"][0]["desired"]) == 2

    monkeypatch.setattr(scheduler, "CHART_MAX", 10)
    _, html = _page(client, f"{URL}?subtree=finance")
    chart = _json_script(html, "scheduler-chart-data")
    assert chart["truncated"] is True and chart["limit"] == 10
    drawn = chart["subtrees"][0]["desired"] + chart["subtrees"][0]["borrow"] + chart["subtrees"][0]["return"]
    newest = sorted((e.at_ns // 1_000_000 for e in events if e.subtree == "finance"), reverse=True)[:10]
    assert sorted(point[0] for point in drawn) == sorted(newest)
    assert 'data-testid="finance-scheduler-chart-truncated"' in html
    assert "The charts show the newest 10 matching events only" in html

    _, html = _page(client, f"{URL}?subtree=nothing-here")
    assert 'data-testid="finance-scheduler-chart-empty"' in html
    assert 'data-testid="finance-scheduler-empty"' in html


def test_without_echarts_the_page_says_charts_are_off(events: list[EventInput], settings: Any) -> None:
    settings.STATICFILES_DIRS = []
    _, html = _page(staff_client(), URL)
    assert 'data-testid="finance-scheduler-charts-unavailable"' in html
    assert "echarts.min.js" not in html and "scheduler.js" not in html
    assert html.count('data-testid="finance-scheduler-row"') == 50


@pytest.mark.parametrize(
    "query",
    [
        "from=2026-13-01",
        "from=03.11.2026",
        "to=2026-11",
        "from=2026-11-04&to=2026-11-03",
        "kind=lend",
        "page=0",
        "page=-1",
        "page=two",
        "page=1234567890",
        "subtree=" + "a" * 65,
    ],
)
def test_a_bad_filter_is_400_invalid_filter(events: list[EventInput], query: str) -> None:
    client = staff_client()
    page = client.get(f"{URL}?{query}")
    assert page.status_code == 400
    assert 'data-code="invalid_filter"' in page.content.decode()
    download = client.get(f"/finance/scheduler/download.csv?{query}")
    assert (download.status_code, download.json()["code"]) == (400, "invalid_filter")


def test_an_unknown_filter_is_400_unknown_filter(events: list[EventInput]) -> None:
    page = staff_client().get(f"{URL}?month=2026-11")
    assert page.status_code == 400 and 'data-code="unknown_filter"' in page.content.decode()


def test_a_customer_gets_403_and_an_anonymous_visitor_is_sent_to_sign_in(events: list[EventInput]) -> None:
    client = owner_client(TenantFactory.create())
    assert client.get(URL).status_code == 403
    assert client.get("/finance/scheduler/download.csv").status_code == 403
    anonymous = Client().get(URL)
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]


def test_the_downloads_are_the_rows_of_the_table(events: list[EventInput]) -> None:
    client = staff_client()
    for query in ("", "?page=2", "?subtree=finance&kind=scale_down", "?from=2026-11-04"):
        shown = client.get(f"{URL}{query}").context["table"]
        rows = csv_rows(client, f"/finance/scheduler/download.csv{query}")
        assert rows == shown_as_csv(shown) and len(rows) == len(shown.rows)
        table = parquet_table(client, f"/finance/scheduler/download.parquet{query}")
        assert table.column_names == [c.key for c in shown.columns]
        assert table.column("event_id").to_pylist() == [r["event_id"] for r in shown.rows]
        assert table.column("at").to_pylist() == [r["at"] for r in shown.rows]
    rows = csv_rows(client, "/finance/scheduler/download.csv?kind=borrow")
    assert [(r["kind"], r["subtree"], r["executor"], r["lender"], r["router"]) for r in rows] == [
        ("borrow", "finance", "b-1,b-2", "batch", "l1-router")
    ]
    assert rows[0]["at"] == "2026-11-03T08:10:30+00:00"


def test_each_subtrees_service_over_time_comes_from_its_records_and_its_objective_from_the_events(
    events: list[EventInput],
) -> None:
    """Per bucket (a day shown: 120 s), the records decided for a subtree: their P99 from arrival to
    answer, the requests in flight on average (summed latency ÷ the bucket) and the wait in line; the P99
    objective is the one the router sent with its events."""
    contract = ContractFactory.create()
    router = signing_agent(contract, agent_id="l1-signing", kind="router")
    executor = signing_agent(contract, agent_id="exec-signing")
    at = START + timedelta(minutes=5, seconds=10)  # the bucket of 08:04
    ingest(
        executor,
        [
            routed_record(executor, router, contract, "finance", at, queued_us=q)
            for q in (10_000, 20_000, 30_000)
        ]
        + [routed_record(executor, router, contract, "batch", at + timedelta(minutes=3))],
    )
    objective = scaling(START + timedelta(hours=2), "finance", 5, 4)
    record_scheduler_events(
        router=_router("l1-third"),
        events=[EventInput(**{**objective.__dict__, "figures": {**objective.figures, "sla_p99_ms": 300.0}})],
    )
    html = staff_client().get(URL, {"from": "2026-11-03", "to": "2026-11-03"}).content.decode()
    chart = _json_script(html, "scheduler-chart-data")
    by_subtree = {series["subtree"]: series for series in chart["subtrees"]}
    bucket_ms = int((START + timedelta(minutes=4)).timestamp() * 1000)
    assert chart["bucket_s"] == 120
    # 3 answers of 150 ms (the records' end − start) in 120 s: 0.45 s ÷ 120 s in flight; waits 10, 20, 30 ms
    assert by_subtree["finance"]["service"] == [[bucket_ms, 150.0, 0.004, 20.0, 3]]
    assert by_subtree["finance"]["sla_p99_ms"] == 300.0
    assert by_subtree["batch"]["service"] == [[bucket_ms + 240_000, 150.0, 0.001, 0.0, 1]]  # 08:08
    assert by_subtree["batch"]["sla_p99_ms"] is None
    assert html.count('data-testid="finance-scheduler-service-chart"') == len(chart["subtrees"])
