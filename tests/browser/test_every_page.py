"""Every portal page and every finance view, in English and in Simplified Chinese, over a real tenant data
set (real ingest, invoice, credit note, dispute, SLA report, key, webhook) in headless Chromium.

Each page is photographed into var/test-output/screenshots/pages/<language>/<page>.png, for people to
look at. In Chinese, the page's visible text (its data taken out: codes, names, reasons, URLs) must hold
none of the English words a customer would see if a message were left untranslated."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from playwright.sync_api import Page

from accounts.models import Role
from finance.views import REPORTS
from sla.models import Objective, SlaPolicy
from tests.browser.conftest import screenshot_root, sign_in
from tests.frontend.test_portal_pages import PAGES
from tests.schemathesis.tenant_data import PASSWORD, TenantData, build_tenant

pytestmark = [pytest.mark.usefixtures("clickhouse")]

LANGUAGES = ("en", "zh-hans")
# UI words, not data: in the Chinese pages any of them means a message nobody translated ("Webhook"
# is not among them: docs/glossary.md keeps it as it is).
ENGLISH = """
Amount Apply Availability Cache Cancel Chart Contract Contracts Cost Costs Created Credit Customer Daily
Date Day Debit Decision Delivery Dimension Dispute Disputes Download Draft Due Event Evidence Expert
Experts Export Failed Filter Finalized Hop Hops Included Invoice Invoices Issued Key Keys Latency Left
Line Lines Margin Month Name Next Objective Open Overview Package Packages Page Paid Payment Pending
Period Previous Price Quantity Reason Reconciliation Record Records Refund Reject Rejected Report
Reports Revenue Revoke Served Settled Status Subtotal Target Tax Tenant Tokens Total Unit Usage Verify
and for from not of per the this with requests tokens total records
"""
FINANCE = ["finance:index", *(f"finance:{name}" for name in REPORTS)]


@pytest.fixture
def alpha(transactional_db: Any) -> Iterator[TenantData]:
    yield build_tenant("alpha")


def data_strings(d: TenantData) -> list[str]:
    """What the pages show of the tenant's own data, verbatim (not to be translated)."""
    return sorted(
        {
            d.tenant.name,
            d.tenant.code,
            d.package.name,
            d.package.code,
            d.contract.code,
            d.sandbox.contract.code,
            d.release.code,
            d.release.name,
            *(stage.name for stage in d.release.stages.all()),
            d.dispute.reason,
            d.credit_note.reason,
            d.webhook.url,
            d.api_key.name,
            d.event.event_id,
            d.agent.agent_id,
            # The package the tenant built: its declaration's words and the manifests, shown verbatim.
            d.built.package.name,
            d.built.package.description,
            d.built.compose_service,
            d.built.kubernetes_manifest,
            json.dumps(d.built.executor_config, indent=2),
            *(p.name for p in SlaPolicy.objects.filter(contract=d.contract)),
            *(o.name for o in Objective.objects.filter(policy__contract=d.contract)),
        }
        - {""},
        key=len,
        reverse=True,
    )


def english_left(text: str, data: list[str]) -> list[str]:
    for value in data:
        text = text.replace(value, " ")
    found = {w for w in re.findall(r"\S+", ENGLISH) if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", text)}
    return sorted(found)


def visit(page: Page, url: str, folder: Path, name: str) -> str:
    answer = page.goto(url)
    assert answer is not None and answer.status == 200, (url, answer and answer.status)
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)
    return page.inner_text("body")


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_page_renders_and_chinese_pages_hold_no_english(
    page: Page, alpha: TenantData, live_server: Any, language: str
) -> None:
    folder = screenshot_root() / "pages" / language
    folder.mkdir(parents=True, exist_ok=True)
    speak = [{"name": "django_language", "value": language, "url": live_server.url}]
    page.context.add_cookies(speak)  # type: ignore[arg-type]
    User.objects.create_user("finance-staff", password=PASSWORD, is_staff=True)
    data = data_strings(alpha)
    untranslated: dict[str, list[str]] = {}

    sign_in(page, alpha.users[Role.OWNER].username, PASSWORD)
    for name, kwargs in PAGES.items():
        text = visit(page, reverse(name, kwargs=kwargs(alpha)), folder, name)
        if language == "zh-hans" and (left := english_left(text, data)):
            untranslated[name] = left
    page.context.clear_cookies()  # signed out
    page.context.add_cookies(speak)  # type: ignore[arg-type]

    sign_in(page, "finance-staff", PASSWORD)
    for name in FINANCE:
        text = visit(page, reverse(name), folder, name.replace(":", "-"))
        if language == "zh-hans" and (left := english_left(text, data)):
            untranslated[name] = left

    assert not untranslated, "\n".join(f"{name}: {words}" for name, words in untranslated.items())
    assert len(list(folder.glob("*.png"))) == len(PAGES) + len(FINANCE)
