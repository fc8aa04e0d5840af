"""Contracts with what is left of each quota (real ClickHouse usage), and the usage dashboard page."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.models import Role
from common.periods import month_of
from entitlements.models import QuotaPeriod
from entitlements.services import issue_api_key
from frontend.selectors import current_period
from tests.frontend.support import ingest, member, priced_contract

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]

CHARTS = ("chart-timeseries", "chart-experts", "chart-routing", "chart-latency", "chart-subtrees")


def test_a_contract_shows_each_quota_used_and_left_this_month() -> None:
    contract = priced_contract()  # 10 requests included
    start, _ = current_period()
    ingest(contract, 4, start + (timezone.now() - start) / 2)
    ingest(priced_contract(tenant=contract.tenant), 9, start + (timezone.now() - start) / 2, agent_id="other")
    response = member(contract.tenant, Role.READ_ONLY).get(
        reverse("portal-contract", kwargs={"code": contract.code})
    )
    assert response.status_code == 200
    [quota] = response.context["quotas"]
    assert (quota.dimension, quota.included, quota.used, quota.left, quota.used_percent) == (
        "requests",
        Decimal(10),
        Decimal(4),
        Decimal(6),
        40,
    )
    assert 'data-testid="quota-left-requests">6<' in response.content.decode()


def test_an_exhausted_quota_leaves_zero() -> None:
    contract = priced_contract()
    start, _ = current_period()
    ingest(contract, 12, start + (timezone.now() - start) / 2)
    response = member(contract.tenant).get(reverse("portal-contract", kwargs={"code": contract.code}))
    [quota] = response.context["quotas"]
    assert (quota.used, quota.left, quota.used_percent) == (Decimal(12), Decimal(0), 100)


def test_the_dashboard_has_the_five_chart_containers_and_loads_echarts_locally() -> None:
    contract = priced_contract()
    page = member(contract.tenant, language="zh-hans").get(reverse("portal-usage")).content.decode()
    for chart in CHARTS:
        assert f'data-testid="{chart}"' in page
    assert '<script src="/static/vendor/echarts/echarts.min.js"></script>' in page
    assert '<script src="/static/frontend/charts.js"></script>' in page
    assert "charts-unavailable" not in page
    assert f'<option value="{contract.code}">' in page
    assert "专家激活（层 × 专家）" in page
    found = re.search(r'<script id="chart-text" type="application/json">(.*?)</script>', page)
    assert found is not None
    texts = json.loads(found[1])
    assert (texts["no_data"], texts["cache_hit_rate"]) == ("此时间范围内没有用量。", "缓存命中率")
    assert (texts["objective"], texts["replicas"]) == ("该子树的 P99 目标", "期望副本数")
    assert "http://" not in page and "https://" not in page  # nothing from a CDN
    client = member(contract.tenant)
    for asset in ("vendor/echarts/echarts.min.js", "frontend/charts.js", "frontend/portal.css"):
        served = client.get(f"/static/{asset}")
        assert served.status_code == 200, asset
        assert served.getvalue(), asset


def test_without_echarts_the_dashboard_says_charts_are_unavailable(settings: Any) -> None:
    settings.STATICFILES_DIRS = []
    page = member(priced_contract().tenant).get(reverse("portal-usage")).content.decode()
    assert 'data-testid="charts-unavailable"' in page
    assert "echarts.min.js" not in page and "charts.js" not in page


def test_each_api_keys_token_quota_left_this_month() -> None:
    contract = priced_contract()
    start, _ = current_period()
    limited = issue_api_key(contract_code=contract.code, quota_tokens=1000, name="limited").api_key
    unlimited = issue_api_key(contract_code=contract.code, name="open").api_key
    QuotaPeriod.objects.create(
        api_key=limited, period=month_of(start), settled_tokens=300, outstanding_tokens=200
    )
    QuotaPeriod.objects.create(api_key=limited, period="2020-01", settled_tokens=999)
    QuotaPeriod.objects.create(api_key=unlimited, period=month_of(start), settled_tokens=70)
    response = member(contract.tenant).get(reverse("portal-contract", kwargs={"code": contract.code}))
    rows = {row.api_key.name: (row.used, row.left) for row in response.context["key_quotas"]}
    assert rows == {"limited": (500, 500), "open": (None, None)}  # no quota: no leases, not counted per key
    text = response.content.decode()
    assert f'data-testid="key-quota-left-{limited.prefix}">500<' in text
    assert f'data-testid="key-quota-used-{unlimited.prefix}">—<' in text
    assert f'data-testid="key-quota-left-{unlimited.prefix}">—<' in text


def test_the_contracts_tokens_this_month_are_shown_for_every_key_together() -> None:
    contract = priced_contract()
    start, _ = current_period()
    issue_api_key(contract_code=contract.code, name="open")
    ingest(contract, 4, start + (timezone.now() - start) / 2)  # 100 in + 20 out each
    response = member(contract.tenant).get(reverse("portal-contract", kwargs={"code": contract.code}))
    assert response.context["contract_tokens"] == Decimal(480)
    said = re.search(r'data-testid="contract-tokens">([^<]+)<', response.content.decode())
    assert said is not None and "This month the contract used 480 tokens" in said.group(1)
