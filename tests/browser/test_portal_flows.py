"""The portal end to end in headless Chromium: buy a package, watch usage arrive from an agent, dispute an
invoice line, download the PDF, and read the portal in Chinese (rendered with the CJK font)."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from accounts.models import Role, Tenant
from agents.models import Agent
from billing.models import Dispute
from catalog.models import ComputePackage, ModelPrice, PackagePlan, PlanPrice
from common.cjk_font import CJK_FONT_FAMILY
from contracts.models import Contract
from frontend.views.usage import charts_available
from scheduling.services import EventInput, record_scheduler_events
from tests.billing.usage import routed_record
from tests.browser.conftest import Shots, sign_in
from tests.factories import (
    ContractFactory,
    ContractPriceFactory,
    MembershipFactory,
    TenantFactory,
    UserFactory,
    signing_agent,
)
from tests.schemathesis.tenant_data import PASSWORD, build_tenant
from treemeter_records import new_record_id

pytestmark = [pytest.mark.usefixtures("clickhouse")]

FACTORY_PASSWORD = "pw-12345"  # tests.factories.UserFactory
CHARTS = ("chart-timeseries", "chart-experts", "chart-routing", "chart-latency", "chart-subtrees")


def member(tenant: Tenant, username: str, role: str = Role.OWNER) -> str:
    MembershipFactory.create(tenant=tenant, role=role, user=UserFactory.create(username=username))
    return username


def chart_states(page: Page) -> dict[str, str | None]:
    return {chart: page.get_by_test_id(chart).get_attribute("data-state") for chart in CHARTS}


def wait_for_charts(page: Page) -> None:
    page.wait_for_function(
        """ids => ids.every(id => ['ready', 'empty', 'error'].includes(
               document.querySelector(`[data-testid="${id}"]`).dataset.state))""",
        arg=list(CHARTS),
    )


def test_an_owner_buys_a_package_and_gets_an_active_contract(page: Page, shots: Shots) -> None:
    tenant = TenantFactory.create(code="gamma-co", name="Gamma Co")
    package = ComputePackage.objects.create(code="chat-moe", name="Chat MoE", unit="request")
    plan = PackagePlan.objects.create(
        package=package, code="starter", name="Starter", currency="CNY", base_fee=Decimal("100.00")
    )
    PlanPrice.objects.create(
        plan=plan, dimension="requests", unit_price=Decimal("0.05"), included_quantity=Decimal(1000)
    )
    sign_in(page, member(tenant, "gamma-owner"), FACTORY_PASSWORD)

    page.get_by_test_id("nav-packages").click()
    expect(page.get_by_test_id("plan-chat-moe-starter")).to_be_visible()
    shots("catalogue")
    page.get_by_test_id("buy-chat-moe-starter").click()
    page.wait_for_load_state("networkidle")

    contract = Contract.objects.get(tenant=tenant, package=package)
    assert (contract.status, contract.plan_id, contract.base_fee) == ("active", plan.pk, Decimal("100.00"))
    expect(page).to_have_url(re.compile(rf"/contracts/{re.escape(contract.code)}$"))
    expect(page.get_by_test_id("messages")).to_contain_text(f"Contract {contract.code} is active.")
    shots("contract after purchase")


def test_usage_appears_after_the_agent_serves_requests(page: Page, shots: Shots, live_server: Any) -> None:
    if not charts_available():
        pytest.skip("ECharts is not installed: `make install` runs `npm ci` in frontend/ where npm exists")
    contract = ContractFactory.create(tenant=TenantFactory.create(code="delta-co", name="Delta Co"))
    ContractPriceFactory.create(contract=contract, dimension="requests", unit_price=Decimal("0.05"))
    agent = signing_agent(contract, agent_id="agent-delta")
    router = signing_agent(contract, agent_id="l1-delta", kind="router")
    sign_in(page, member(contract.tenant, "delta-owner"), FACTORY_PASSWORD)

    page.get_by_test_id("nav-usage").click()
    wait_for_charts(page)
    assert chart_states(page)["chart-timeseries"] == "empty"
    assert chart_states(page)["chart-subtrees"] == "empty"
    shots("dashboard before any request")

    # The executor ships what it served, decided by the router for subtree `finance`: signed batches over
    # HTTP to the live server's ingest endpoint. The router reports a scaling step of that subtree.
    now = datetime.now(UTC)
    served = [
        routed_record(agent, router, contract, "finance", now - timedelta(minutes=40 - i)) for i in range(40)
    ]
    step = EventInput(
        id=new_record_id(),
        kind="scale_up",
        at_ns=time.time_ns() - 30 * 60 * 10**9,
        subtree="finance",
        reason="p99 above 200 ms for 3 periods",
        figures={"desired": 2, "replicas": 1, "sla_p99_ms": 300.0},
    )
    record_scheduler_events(router=Agent.objects.get(agent_id=router.agent_id), events=[step])
    for batch in (served[:25], served[25:]):
        answer = httpx.post(
            f"{live_server.url}/v1/ingest/batches",
            content=agent.batch(batch).body(),
            headers={"Content-Type": "application/x-ndjson"},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text

    page.reload()
    wait_for_charts(page)
    assert chart_states(page) == dict.fromkeys(CHARTS, "ready")
    expect(page.get_by_test_id("chart-subtree")).to_have_attribute("data-subtree", "finance")
    shots("dashboard with the served requests")
    series = page.request.get("/v1/usage/timeseries?dimension=requests").json()["series"]
    assert sum(Decimal(value) for s in series for _, value in s["points"]) == 40
    experts = page.request.get("/v1/usage/experts").json()
    # Each record routes 150 + 88 tokens to layer 0's experts 1 and 4, and 238 to layer 1's expert 2.
    assert sorted(map(tuple, experts["cells"])) == [(0, 1, 6000), (0, 4, 3520), (1, 2, 9520)]


def test_a_billing_member_disputes_an_invoice_line(page: Page, shots: Shots) -> None:
    alpha = build_tenant("alpha")
    sign_in(page, alpha.users[Role.BILLING].username, PASSWORD)
    page.get_by_test_id("nav-invoices").click()
    page.get_by_test_id(f"invoice-link-{alpha.invoice.pk}").click()
    expect(page.get_by_test_id("invoice-number")).to_have_text(alpha.invoice.number or "")
    expect(page.get_by_test_id(f"line-dispute-{alpha.line.pk}")).to_be_visible()  # disputed already
    shots("invoice with its lines")

    line = alpha.free_line
    page.get_by_test_id(f"dispute-button-{line.pk}").click()
    page.get_by_test_id("dispute-reason").fill("Our gateway counted 5 requests, not 6.")
    shots("dispute form")
    page.get_by_test_id("dispute-submit").click()
    expect(page.get_by_test_id("dispute-opened")).to_be_visible()
    shots("dispute opened")

    dispute = Dispute.objects.get(line=line)
    assert (dispute.status, dispute.reason, dispute.tenant_id) == (
        "open",
        "Our gateway counted 5 requests, not 6.",
        alpha.tenant.pk,
    )
    assert dispute.evidence["records"] == 6
    page.get_by_test_id("dispute-opened").click()
    expect(page.get_by_text("Our gateway counted 5 requests, not 6.")).to_be_visible()
    shots("dispute with its evidence")


def test_a_billing_member_uploads_receipts_and_disputes_a_missing_record(
    page: Page, shots: Shots, tmp_path: Path
) -> None:
    alpha = build_tenant("alpha")
    sign_in(page, alpha.users[Role.BILLING].username, PASSWORD)
    page.get_by_test_id("nav-disputes").click()
    page.get_by_test_id("receipts-link").click()
    page.get_by_test_id("receipt-text").fill(alpha.receipt)
    page.get_by_test_id("receipt-submit").click()
    expect(page.get_by_test_id("receipt-status")).to_have_text("In the log, in a signed checkpoint")
    expect(page.get_by_test_id("receipt-checkpoint")).to_contain_text("treemeter")
    shots("a logged receipt with its record and proof")

    upload = tmp_path / "receipt.txt"
    upload.write_text(alpha.missing_receipts[0] + "\n")
    page.get_by_test_id("receipt-text").fill("")
    page.get_by_test_id("receipt-file").set_input_files(str(upload))
    page.get_by_test_id("receipt-submit").click()
    expect(page.get_by_test_id("receipt-status")).to_have_text("Missing from the log")
    shots("a missing record's receipt, uploaded")
    page.get_by_test_id("receipt-dispute").click()
    dispute = Dispute.objects.get(evidence__receipt__status="missing")
    expect(page).to_have_url(re.compile(rf"/disputes/{dispute.pk}$"))
    shots("the dispute the receipt opened")
    assert dispute.tenant_id == alpha.tenant.pk


def test_a_member_downloads_the_invoice_pdf(page: Page, shots: Shots) -> None:
    alpha = build_tenant("alpha")
    sign_in(page, alpha.users[Role.READ_ONLY].username, PASSWORD)
    page.goto(f"/invoices/{alpha.invoice.pk}")
    shots("invoice page")

    for test_id in ("invoice-pdf", "invoice-pdf-other"):
        with page.expect_download() as download_info:
            page.get_by_test_id(test_id).click()
        download = download_info.value
        target = shots.folder / f"{test_id}-{download.suggested_filename}"
        download.save_as(target)
        body = target.read_bytes()
        assert body.startswith(b"%PDF-") and body.rstrip().endswith(b"%%EOF"), body[:40]
        assert len(body) > 1500


def test_the_portal_switches_to_chinese_in_the_cjk_font(page: Page, shots: Shots) -> None:
    tenant = TenantFactory.create(code="epsilon-co", name="Epsilon Co")
    sign_in(page, member(tenant, "epsilon-owner"), FACTORY_PASSWORD)
    expect(page.get_by_test_id("nav-home")).to_have_text("Overview")
    shots("overview in english")

    page.get_by_test_id("language-select").select_option("zh-hans")
    page.wait_for_load_state("networkidle")
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    expect(page.get_by_test_id("nav-home")).to_have_text("概览")
    expect(page.get_by_test_id("nav-usage")).to_have_text("用量")
    shots("overview in chinese")
    # The project's CJK font (the PDFs' too), from its pip package: the first family of the portal's stack
    # that a machine without Noto/Source Han/PingFang/YaHei has (conftest gives it to Chromium).
    assert rendering_fonts(page, '[data-testid="nav-home"]') == [CJK_FONT_FAMILY]

    page.goto("/invoices/")
    expect(page.get_by_test_id("nav-invoices")).to_have_text("发票")  # the choice sticks
    shots("invoices in chinese")


def rendering_fonts(page: Page, selector: str) -> list[str]:
    """The platform fonts Chromium actually drew a node's text with (DevTools CSS domain)."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument")["root"]["nodeId"]
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
    fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    return [font["familyName"] for font in fonts]


def test_a_member_follows_a_line_to_a_record_and_verifies_its_inclusion(page: Page, shots: Shots) -> None:
    alpha = build_tenant("alpha")
    sign_in(page, alpha.users[Role.READ_ONLY].username, PASSWORD)
    page.goto(f"/invoices/{alpha.invoice.pk}")
    page.get_by_test_id(f"line-records-{alpha.free_line.pk}").click()
    expect(page.get_by_test_id("line-records")).to_be_visible()
    shots("records of an invoice line")
    page.locator('[data-testid="line-records"] tbody a').first.click()
    expect(page.get_by_test_id("record-leaf-hash")).not_to_be_empty()
    page.get_by_test_id("verify-record").click()
    steps = page.get_by_test_id("verify-steps")
    expect(steps).to_have_attribute("data-state", "verified", timeout=10_000)
    expect(steps.locator("li.ok")).to_have_count(5)  # path, checkpoint, key, signature, and the summary
    expect(steps).to_contain_text("Verified in your browser: this record is in the signed log.")
    shots("record verified in the browser")


def test_a_billing_member_sees_a_dependency_outage_and_appeals_it(page: Page, shots: Shots) -> None:
    alpha = build_tenant("alpha")
    outage = alpha.outage
    sign_in(page, alpha.users[Role.BILLING].username, PASSWORD)
    page.get_by_test_id("nav-sla").click()
    state = page.get_by_test_id(f"dependency-state-{alpha.dependency.pk}")
    expect(state).to_have_text("Failing")  # its last check failed; the outage before it is closed
    expect(page.get_by_test_id(f"outage-row-{outage.pk}")).to_contain_text("2026-11-20 10:01 UTC")
    shots("dependencies and outages")

    page.get_by_test_id(f"outage-appeal-reason-{outage.pk}").fill("Our HIS answered; the probe used port 9.")
    page.get_by_test_id(f"outage-appeal-submit-{outage.pk}").click()

    expect(page.get_by_test_id(f"outage-appeal-{outage.pk}")).to_contain_text("open")
    shots("appeal opened")
    [appeal] = outage.appeals.all()
    assert (appeal.reason, appeal.opened_by) == (
        "Our HIS answered; the probe used port 9.",
        alpha.users[Role.BILLING],
    )
    assert [c["error"] for c in appeal.evidence["checks"]] == ["ConnectError: alpha refused"]


def test_a_member_reads_the_model_prices_and_a_models_history(page: Page, shots: Shots) -> None:
    today = datetime.now(UTC).date()
    for model_id, provider, versions in (
        ("gpt-4o", "openai", [(40, "0.0000025", "0.00001", None), (10, "0.000002", "0.000008", "0.000001")]),
        ("claude-sonnet-4", "anthropic", [(30, "0.000003", "0.000015", "0.0000003")]),
        ("text-embedding-3-small", "openai", [(60, "0.00000002", "0", None)]),
    ):
        for days_ago, input_price, output_price, read in versions:
            ModelPrice.objects.create(
                model_id=model_id,
                currency="CNY",
                effective_from=today - timedelta(days=days_ago),
                input_per_token=Decimal(input_price),
                output_per_token=Decimal(output_price),
                cache_read_per_token=None if read is None else Decimal(read),
                provider=provider,
                mode="embedding" if "embedding" in model_id else "chat",
            )
    contract = ContractFactory.create(
        tenant=TenantFactory.create(code="zeta-co", name="Zeta Co"),
        price_by_catalogue=True,
        catalogue_adjustment=Decimal("-0.15"),
    )
    sign_in(page, member(contract.tenant, "zeta-owner"), FACTORY_PASSWORD)

    page.get_by_test_id("nav-model-prices").click()
    cells = page.get_by_test_id("model-price-gpt-4o").locator("td")
    for index, text in ((4, "2"), (5, "8"), (6, "1"), (7, "2 = input")):  # per 1M: its newer version
        expect(cells.nth(index)).to_have_text(text)
    expect(page.get_by_test_id("model-price-text-embedding-3-small").locator("td").nth(4)).to_have_text(
        "0.02"
    )
    expect(page.get_by_test_id("model-price-claude-sonnet-4")).to_contain_text("= input")
    shots("model prices in force today")

    page.get_by_test_id("model-link-gpt-4o").click()
    expect(page.get_by_test_id("model-history-table").locator("tbody tr")).to_have_count(2)
    if charts_available():
        expect(page.get_by_test_id("chart-model-history")).to_have_attribute("data-state", "ready")
    shots("a models price history")

    page.goto(f"/contracts/{contract.code}")
    expect(page.get_by_test_id("contract-catalogue-adjustment")).to_have_text("\u221215 %")
    page.get_by_test_id("contract-catalogue-link").click()
    expect(page.get_by_test_id("model-prices-currency")).to_have_value("CNY")
