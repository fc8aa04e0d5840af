"""Sign in to the portal, see the tenant's overview, and be refused with a wrong password."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from accounts.models import Role
from tests.browser.conftest import Shots, sign_in
from tests.schemathesis.tenant_data import PASSWORD, build_tenant

pytestmark = [pytest.mark.usefixtures("clickhouse")]


def test_a_member_signs_in_and_sees_the_tenants_overview(page: Page, shots: Shots) -> None:
    alpha = build_tenant("alpha")
    page.goto("/")
    expect(page.get_by_test_id("login-form")).to_be_visible()
    shots("sign-in form")

    page.get_by_test_id("login-username").fill(alpha.users[Role.OWNER].username)
    page.get_by_test_id("login-password").fill("not the password")
    page.get_by_test_id("login-submit").click()
    expect(page.get_by_test_id("login-error")).to_be_visible()
    shots("wrong password refused")

    sign_in(page, alpha.users[Role.OWNER].username, PASSWORD)
    expect(page.get_by_test_id("who")).to_contain_text("alpha-owner")
    expect(page.get_by_test_id("who")).to_contain_text(alpha.tenant.name)
    expect(page.get_by_test_id("tile-contracts")).to_contain_text("1")
    expect(page.get_by_test_id("tile-disputes")).to_contain_text("1")
    shots("overview after sign-in")

    page.get_by_test_id("logout").click()
    expect(page.get_by_test_id("login-form")).to_be_visible()
    page.goto("/invoices/")
    expect(page).to_have_url(re.compile(r"/login/"))
    shots("signed out")
