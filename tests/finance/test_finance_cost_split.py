"""A month's cost split by layer and by expert (billing.costs.period_cost_split, two ClickHouse queries):
hand-computed figures that add up to the month's cost to the cent, on the finance page and its download."""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing.costs import period_cost_split
from common.periods import month_bounds
from tests.finance.support import csv_rows, staff_client
from tests.finance.test_finance_costs import served  # noqa: F401 - the fixture

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse", "served")]
D = Decimal


def test_a_month_split_by_layer_and_expert_adds_up_to_the_cent() -> None:
    """14 priced requests (2 more on a host without a profile), each L1 500 µs, L2 3,000 µs and L3
    90,000 µs at 7,200 / 7,200 / 28,000 CNY an hour: 0.001 + 0.006 + 0.7 = 0.707; 9.898 in all → 9.90.
    By layer: 0.014, 0.084, 9.8 scaled to 9.90 is 1.40 / 8.40 / 980.20 cents: the cent left over goes
    to L2 (0.4017 of a cent left against L1's 0.4003).
    By expert (tokens 150 and 88 in layer 0, 238 in layer 1; each layer weighs a half): per request
    L3 0.7 × 150/476, × 88/476, × 1/2, plus L2 0.006 / 3 each: 3.1162…, 1.8398…, 4.928 over 14
    requests, scaled to L2 + L3 = 9.89: 311.81 / 184.09 / 493.10 cents → 3.12, 1.84, 4.93."""
    split = period_cost_split(*month_bounds("2026-11"))

    assert split is not None
    assert (split.currency, split.total, split.requests, split.unpriced_requests) == ("CNY", D("9.90"), 14, 2)
    assert [(r.key, r.requests, r.cost) for r in split.by_layer] == [
        ("L1", 14, D("0.01")),
        ("L2", 14, D("0.09")),
        ("L3", 14, D("9.80")),
    ]
    assert [(r.key, r.requests, r.cost) for r in split.by_expert] == [
        ("tiny-qwen3-moe layer 0 expert 1", 14, D("3.12")),
        ("tiny-qwen3-moe layer 0 expert 4", 14, D("1.84")),
        ("tiny-qwen3-moe layer 1 expert 2", 14, D("4.93")),
        ("unattributed", None, D("0.00")),
    ]
    assert sum(r.cost for r in split.by_layer) == split.total
    assert sum(r.cost for r in split.by_expert) == D("9.89")  # L2 + L3


def test_the_finance_page_and_its_download_show_the_same_split() -> None:
    client = staff_client()
    page = client.get("/finance/cost-split/?month=2026-11&by=layer")
    rows = csv_rows(client, "/finance/cost-split/download.csv?month=2026-11&by=expert")

    assert page.status_code == 200
    assert [(r["part"], r["cost"]) for r in page.context["table"].rows] == [
        ("L1", D("0.01")),
        ("L2", D("0.09")),
        ("L3", D("9.80")),
        ("total", D("9.90")),
    ]
    assert "L2 expert cache" in page.content.decode()
    assert [tuple(r.values()) for r in rows][-2:] == [
        ("unattributed", "", "0.00", "CNY"),
        ("total", "14", "9.90", "CNY"),
    ]
    assert client.get("/finance/cost-split/?by=hop").status_code == 400
