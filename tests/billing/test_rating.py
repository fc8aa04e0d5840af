"""rate_usage arithmetic, against hand-computed amounts."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing.rating import PeriodUsage, rate_period, rate_usage
from billing.terms import ChargeTerms, CouponTerms, Terms
from common.money import round_money
from common.periods import month_bounds

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


money_prices = st.decimals(min_value=0, max_value=50, places=7)


@settings(max_examples=200)
@given(
    currency=st.sampled_from(["CNY", "JPY", "USD"]),
    prices=st.lists(money_prices, min_size=1, max_size=4),
    quantities=st.lists(st.decimals(min_value=0, max_value=10**6, places=3), min_size=4, max_size=4),
    base_fee=st.decimals(min_value=0, max_value=1000, places=2),
    commitment=st.decimals(min_value=0, max_value=5000, places=0),
    percent_off=st.none() | st.decimals(min_value="0.01", max_value=1, places=2),
    tax_rate=st.decimals(min_value=0, max_value="0.25", places=3),
    inclusive=st.booleans(),
)
def test_invoice_totals_are_the_sum_of_rounded_lines(
    currency: str,
    prices: list[Decimal],
    quantities: list[Decimal],
    base_fee: Decimal,
    commitment: Decimal,
    percent_off: Decimal | None,
    tax_rate: Decimal,
    inclusive: bool,
) -> None:
    dimensions = ["requests", "tokens_in", "tokens_out", "l3_seconds"]
    terms = Terms(
        contract="c",
        currency=currency,
        base_fee=str(base_fee),
        minimum_commitment=str(commitment),
        tax_rate=str(tax_rate),
        tax_inclusive=inclusive,
        charges=[
            ChargeTerms(d, d, "per_unit", {"unit_price": str(p)})
            for d, p in zip(dimensions, prices, strict=False)
        ],
        coupons=[] if percent_off is None else [CouponTerms("X", str(percent_off), None, None)],
    )
    usage = PeriodUsage(0, dict(zip(dimensions, quantities, strict=True)))
    rated = rate_period(terms, usage, *month_bounds("2026-11"))

    for line in rated.lines:
        assert line.amount == round_money(line.amount, currency)
    assert rated.subtotal == sum((line.amount for line in rated.lines), D(0))
    assert rated.tax == round_money(rated.tax, currency)
    assert rated.total == (rated.subtotal if inclusive else rated.subtotal + rated.tax)
    assert rated.subtotal >= 0
    if percent_off is None:  # the true-up tops the period up to the commitment
        assert rated.subtotal >= round_money(commitment, currency)
