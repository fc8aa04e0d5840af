"""Every finance page speaks zh-Hans and English: the labels come from finance's own catalogue."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.http import QueryDict
from django.utils import translation

from common.periods import month_bounds
from finance import reports, scheduler
from finance.reconciliation import ReconciliationFilter
from finance.selectors import InvoiceFilter
from finance.tables import Table
from scheduling.selectors import EventFilter
from tests.finance.support import staff_client

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
NOW = datetime(2026, 12, 2, tzinfo=UTC)


def _tables() -> list[Table]:
    return [
        reports.invoices(InvoiceFilter()),
        reports.invoice_totals(InvoiceFilter()),
        reports.revenue(["month", "package", "tenant"], None, None, ""),
        reports.costs(*month_bounds("2026-11"), "package"),
        reports.costs(*month_bounds("2026-11"), "tenant"),
        reports.cost_split(*month_bounds("2026-11"), "layer"),
        reports.cost_split(*month_bounds("2026-11"), "expert"),
        reports.disputes("", NOW),
        reports.reconciliation(ReconciliationFilter()),
        scheduler.events_table(QueryDict(), EventFilter())[0],
        reports.package_lifecycle("quarter", "2026-07", "2026-12", NOW),
        reports.package_lifecycle("month", "2026-11", "2026-11", NOW),
    ]


def test_every_column_label_and_code_label_has_a_chinese_translation() -> None:
    untranslated = []
    for table in _tables():
        for column in table.columns:
            texts = [column.label, *column.labels.values()]
            for text in texts:
                with translation.override("en"):
                    english = str(text)
                with translation.override("zh-hans"):
                    chinese = str(text)
                if chinese == english:
                    untranslated.append(english)
    assert untranslated == []


@pytest.mark.parametrize(
    ("url", "english", "chinese"),
    [
        ("/finance/", "Reconciliation", "对账"),
        ("/finance/invoices/", "Totals per currency", "按币种合计"),
        ("/finance/revenue/", "Net revenue", "净收入"),
        ("/finance/costs/?month=2026-11", "Gross margin", "毛利率"),
        ("/finance/cost-split/?month=2026-11&by=expert", "Cost by layer and expert", "按层与专家的成本"),
        ("/finance/disputes/", "Dispute queue", "争议队列"),
        ("/finance/reconciliation/?month=2026-10", "Every difference is explained.", "所有差异均已解释。"),
        ("/finance/scheduler/", "as its L1 routers report it", "由其 L1 路由器上报"),
        ("/finance/packages/", "Package lifecycle", "套餐生命周期"),
    ],
)
def test_pages_switch_language(url: str, english: str, chinese: str) -> None:
    client = staff_client()
    in_english = client.get(url, headers={"accept-language": "en"}).content.decode()
    in_chinese = client.get(url, headers={"accept-language": "zh-hans"}).content.decode()
    assert english in in_english and chinese not in in_english
    assert chinese in in_chinese and english not in in_chinese
    assert 'lang="zh-hans"' in in_chinese
