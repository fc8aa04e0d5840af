"""The sandbox in the portal: opened from the form on two packages, its three figures and projected
invoice for the packages ticked, a key shown once, the simulated traffic changed, the reset; a bad
form answers 400 with the service's message; read-only members cannot write."""

from __future__ import annotations

import pytest
from django.urls import reverse

from accounts.models import Role
from sandbox.models import Sandbox
from tests.frontend.support import member
from tests.sandbox.support import production_with_packages

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
URL = reverse("portal-sandbox")


def test_open_project_issue_a_key_change_the_traffic_and_reset() -> None:
    production = production_with_packages()
    owner = member(production.tenant)
    form = owner.get(URL).content.decode()
    assert 'data-testid="sandbox-open"' in form and 'value="logistics"' in form

    bad = owner.post(URL, {"action": "open", "package": ["nope"], "daily_events": "10"})
    assert bad.status_code == 400 and "nope" in bad.content.decode()
    opened = owner.post(URL, {"action": "open", "package": ["supplier", "logistics"], "daily_events": "50"})
    assert opened.status_code == 302
    sandbox = Sandbox.objects.get(tenant=production.tenant)
    assert sandbox.daily_events == 50

    page = owner.get(URL, {"package": "supplier"}).content.decode()
    assert sandbox.contract.code in page and 'data-testid="sandbox-metrics"' in page
    assert 'data-testid="sandbox-projection-total"' in page and "100.00" in page  # supplier's base fee
    keyed = owner.post(URL, {"action": "key", "package": "logistics"}).content.decode()
    assert 'data-testid="sandbox-key"' in keyed and "tmk_" in keyed
    assert owner.post(URL, {"action": "traffic", "daily_events": "0"}).status_code == 302
    assert owner.post(URL, {"action": "reset"}).status_code == 302
    sandbox.refresh_from_db()
    assert sandbox.daily_events == 0 and sandbox.reset_at is not None

    chinese = member(production.tenant, language="zh-hans").get(URL).content.decode()
    assert "预估账单" in chinese and "沙箱" in chinese


def test_read_only_members_read_but_cannot_write() -> None:
    production = production_with_packages()
    reader = member(production.tenant, Role.READ_ONLY)
    assert reader.get(URL).status_code == 200
    refused = reader.post(URL, {"action": "open", "package": ["supplier"]})
    assert refused.status_code == 403
    assert not Sandbox.objects.exists()
