"""A package from the factory form to a sandbox to its gray release, in headless Chromium, in English and
in Chinese: an owner uploads an ONNX model through the factory form and gets the quote, opens a sandbox
on the built package and reads its figures and projected invoice, then reads the gray-release plan of its
contract and one stage's report."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from catalog.models import HostCostProfile
from package_factory.models import PackageBuild
from releases.services import PlanSpec, StageSpec, create_plan
from sandbox.models import Sandbox
from tests.browser.conftest import Shots, sign_in
from tests.browser.test_portal_flows import FACTORY_PASSWORD, member
from tests.factories import ContractFactory, TenantFactory
from tests.package_factory.onnx_models import LINEAR_INPUTS, LINEAR_OUTPUTS, linear_model

pytestmark = [pytest.mark.usefixtures("clickhouse")]
HEADINGS = {  # language → (factory, sandbox, releases)
    "en": ("Package factory", "Sandbox", "Gray releases"),
    "zh-hans": ("套餐工厂", "沙箱", "灰度发布"),
}


@pytest.mark.parametrize("language", sorted(HEADINGS))
def test_factory_form_then_sandbox_then_release_report(
    page: Page, shots: Shots, tmp_path: Path, live_server: str, language: str
) -> None:
    factory, sandbox, releases = HEADINGS[language]
    HostCostProfile.objects.create(
        host_class="cpu-2",
        currency="CNY",
        depreciation_per_hour=Decimal(2),
        power_per_hour=Decimal("0.5"),
        operations_per_hour=Decimal(1),
    )
    tenant = TenantFactory.create(code="delta-co", name="Delta Co")
    contract = ContractFactory.create(tenant=tenant)
    create_plan(
        spec=PlanSpec("delta-launch", "Launch", contract.code, stages=[StageSpec("Day 1", [])]),
        now=timezone.now(),
    )
    page.context.add_cookies([{"name": "django_language", "value": language, "url": str(live_server)}])
    sign_in(page, member(tenant, "delta-owner"), FACTORY_PASSWORD)

    # The factory form: a template, the model file, the codes; the build page shows the quote.
    page.get_by_test_id("nav-factory").click()
    expect(page.locator("h1")).to_contain_text(factory)
    page.get_by_test_id("template-choice").select_option("insurance-claim-documents")
    page.get_by_test_id("template-use").click()
    model = tmp_path / "claims.onnx"
    model.write_bytes(linear_model())
    page.get_by_test_id("model-file").set_input_files(str(model))
    page.get_by_test_id("inputs").fill(json.dumps(LINEAR_INPUTS))
    page.get_by_test_id("outputs").fill(json.dumps(LINEAR_OUTPUTS))
    page.get_by_test_id("package-code").fill("delta-claims")
    page.get_by_test_id("capability-code").fill("delta-claims-ocr")
    page.get_by_test_id("factory-build").click()
    page.wait_for_load_state("networkidle")
    expect(page).to_have_url(re.compile(r"/factory/delta-claims$"))
    expect(page.get_by_test_id("quote-formula")).to_contain_text("× 1.3 =")
    assert PackageBuild.objects.filter(package__code="delta-claims", tenant=tenant).exists()
    shots("factory build")

    # The sandbox on the built package: opened from its form, then its figures and projected invoice.
    page.get_by_test_id("nav-sandbox").click()
    expect(page.locator("h1")).to_contain_text(sandbox)
    form = page.get_by_test_id("sandbox-open")
    form.locator('input[value="delta-claims"]').check()
    form.locator("button").click()
    page.wait_for_load_state("networkidle")
    expect(page.get_by_test_id("sandbox-metrics")).to_be_visible()
    expect(page.get_by_test_id("sandbox-projection-total")).to_be_visible()
    expect(page.get_by_test_id("sandbox-no-calls")).to_be_visible()  # no chart before any call
    expect(page.get_by_test_id("sandbox-p50")).to_have_text("—")
    box = Sandbox.objects.get(tenant=tenant)
    assert box.contract.sandbox and [p.code for p in box.contract.held_packages()] == ["delta-claims"]
    page.get_by_test_id("sandbox-issue-key").click()
    expect(page.get_by_test_id("sandbox-key")).to_contain_text("tmk_")
    shots("sandbox")

    # The gray release of the contract's package and its first stage's report.
    page.get_by_test_id("nav-releases").click()
    expect(page.locator("h1")).to_contain_text(releases)
    expect(page.get_by_test_id("release-plan")).to_contain_text("delta-launch")
    page.get_by_test_id("release-plan").locator("a").first.click()
    page.wait_for_load_state("networkidle")
    expect(page.get_by_test_id("release-resources")).to_be_visible()
    expect(page.get_by_test_id("release-acceptance")).to_be_visible()
    shots("release stage report")
