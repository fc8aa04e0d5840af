"""Money always carries its currency code and its minor unit; numbers follow the active language."""

from __future__ import annotations

from decimal import Decimal

from django.utils import translation

from frontend.templatetags.portal import money, quantity


def test_money_has_its_currency_code_and_minor_unit() -> None:
    with translation.override("en"):
        assert money(Decimal("1234567.005"), "CNY") == "CNY 1,234,567.01"
        assert money(Decimal("0.2"), "USD") == "USD 0.20"
        assert money(Decimal("1500.4"), "JPY") == "JPY 1,500"
        assert money("12.345", "EUR") == "EUR 12.35"
        assert money(None, "EUR") == ""


def test_quantities_drop_trailing_zeros_and_group_by_language() -> None:
    with translation.override("en"):
        assert quantity(Decimal("12000.500000")) == "12,000.5"
        assert quantity(Decimal("4.000000")) == "4"
        assert quantity(7) == "7"
    with translation.override("zh-hans"):
        # frontend/formats/zh_Hans: "." decimals, thousands grouped by "," as on Chinese invoices.
        assert quantity(Decimal("12000.500000")) == "12,000.5"
        assert money(Decimal("1234.5"), "CNY") == "CNY 1,234.50"
