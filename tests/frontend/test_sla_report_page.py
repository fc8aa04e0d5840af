"""The SLA report as the customer reads it: daily columns under their own headings, the window in the
report's time zone, the PDF in the page's language, and a daily chart that plots what was measured."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from sla.pdf import daily_series
from sla.services import compute_report
from tests.factories import ContractFactory, signing_agent
from tests.frontend.support import member
from tests.sla.helpers import make_policy, ns, store

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
SHANGHAI_NOV_10 = ns(2026, 11, 10, 12)  # 20:00 in Shanghai, the same local day


@pytest.fixture
def report():
    """November in Shanghai: on the 10th, 3 requests all served (availability 100 %) of which 1 within
    L3's 150 ms (latency 33.3333 %); no traffic on any other day."""
    contract = ContractFactory.create()
    make_policy(contract, latency=[("l3", "150", "90")])
    agent = signing_agent(contract)
    store(
        [
            agent.record(
                contract,
                start_ns=SHANGHAI_NOV_10 + i * 10**9,
                hops=[{"layer": "L3", "node": "g", "latency_us": latency}],
            )
            for i, latency in enumerate((100_000, 160_000, 170_000))
        ]
    )
    return compute_report(contract, "2026-11", now=datetime(2026, 12, 5, tzinfo=UTC))


def test_each_daily_cell_is_under_its_objective(report) -> None:
    assert [o["name"] for o in report.objectives] == ["availability", "latency-l3"]
    page = member(report.contract.tenant).get(f"/sla-reports/{report.pk}").content.decode()
    daily = page[page.index('class="data compact daily"') :]
    headings = re.findall(r"<th>([^<]+) %</th>", daily[: daily.index("</thead>")])
    assert headings == ["availability", "latency-l3"]
    row_match = re.search(r"<tr><td>2026-11-10</td>(.*?)</tr>", daily)
    assert row_match is not None
    row = row_match.group(1)
    assert re.findall(r"</span> ([^<]+)</td>", row) == [
        "100",
        "33.3333",
    ]  # the API's 100.0000, without trailing zeros


def test_the_window_is_in_the_reports_time_zone_and_the_pdf_in_the_pages_language(report) -> None:
    english = member(report.contract.tenant).get(f"/sla-reports/{report.pk}").content.decode()
    window_match = re.search(r'data-testid="sla-window">([^<]+)<', english)
    assert window_match is not None
    window = window_match.group(1)
    assert window == "11/01/2026 – 11/30/2026 (Asia/Shanghai)"  # not the UTC 10/31 – 11/30
    assert f'/sla-reports/{report.pk}/pdf?lang=en"' in english
    chinese = member(report.contract.tenant, language="zh-hans").get(f"/sla-reports/{report.pk}")
    assert f'/sla-reports/{report.pk}/pdf?lang=zh-Hans"' in chinese.content.decode()


def test_the_pdf_chart_plots_every_objective_and_no_bar_without_traffic(report) -> None:
    availability, latency = daily_series(report)
    assert len(availability) == len(latency) == 30
    assert (availability[9], latency[9]) == (100.0, 33.3333)
    assert availability[:9] == latency[:9] == [None] * 9  # no traffic: nothing measured, not 100 %


def test_layers_percent_and_provenance_read_as_people_write_them(report) -> None:
    page = (
        member(report.contract.tenant, language="zh-hans").get(f"/sla-reports/{report.pk}").content.decode()
    )
    objectives = page[page.index('data-testid="sla-objectives"') :]
    assert "<td>L3</td>" in objectives and "<td>l3</td>" not in objectives
    assert "<td>端到端</td>" in page  # the e2e percentiles row
    provenance = re.search(r'data-testid="sla-provenance">(.*?)</p>', page, re.S)
    assert provenance is not None
    said = provenance.group(1)
    assert "计算于 2026-12-05 00:00:00 UTC" in " ".join(said.split())
    assert "+00:00" not in said and "T00:00" not in said
