"""rate_usage arithmetic, against hand-computed amounts."""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing.rating import rate_usage
from contracts.money import round_money

D = Decimal


def test_lines_follow_dimension_order_and_multiply_exactly() -> None:
    lines = rate_usage(
        {"tokens_out": D(1_560_711), "requests": D(5_883), "l3_seconds": D("472.943585")},
        {"l3_seconds": D("0.80"), "requests": D("0.05"), "tokens_out": D("0.00006")},
        "CNY",
    )
    assert [(line.dimension, line.amount) for line in lines] == [
        ("requests", D("294.15")),  # 5,883 × 0.05
        ("tokens_out", D("93.64")),  # 1,560,711 × 0.00006 = 93.64266
        ("l3_seconds", D("378.35")),  # 472.943585 × 0.80 = 378.354868
    ]


def test_a_priced_dimension_without_usage_is_a_zero_line() -> None:
    (line,) = rate_usage({}, {"expert_tokens": D("0.000001")}, "CNY")
    assert (line.quantity, line.amount) == (D(0), D("0.00"))


def test_unpriced_usage_is_not_billed() -> None:
    assert rate_usage({"requests": D(10)}, {}, "CNY") == []


@pytest.mark.parametrize(
    ("amount", "currency", "expected"),
    [
        (D("0.005"), "CNY", D("0.01")),  # half up
        (D("0.0049999"), "CNY", D("0.00")),
        (D("2.675"), "USD", D("2.68")),
        (D("1234.5"), "JPY", D("1235")),  # no minor unit
        (D("-0.005"), "EUR", D("-0.01")),
    ],
)
def test_rounding_to_the_currency_minor_unit(amount: Decimal, currency: str, expected: Decimal) -> None:
    assert round_money(amount, currency) == expected


def test_jpy_contract_rounds_to_whole_yen() -> None:
    (line,) = rate_usage({"requests": D(333)}, {"requests": D("1.5")}, "JPY")
    assert line.amount == D("500")  # 499.5 → 500
