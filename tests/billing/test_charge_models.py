"""Charge models against hand-computed tables, tier boundaries included, and hypothesis properties."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pricing.charge_models import build_charge_model
from pricing.errors import TermsError

D = Decimal
TIERS = [
    {"up_to": 100, "unit_price": "1.00", "flat_fee": "10"},
    {"up_to": 1000, "unit_price": "0.50"},
    {"unit_price": "0.10"},
]


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [
        (0, "0"),
        (1, "11.00"),  # 1 × 1.00 + flat 10
        (100, "110.00"),  # the first tier's edge: still all in tier 1
        (101, "110.50"),  # one unit into tier 2
        (1000, "560.00"),  # 110 + 900 × 0.50
        (1001, "560.10"),  # one unit into tier 3
        (2000, "660.00"),  # 560 + 1000 × 0.10
        ("100.5", "110.25"),  # fractional units (GPU seconds)
    ],
)
def test_graduated_prices_each_tier_s_units(quantity: Any, expected: str) -> None:
    model = build_charge_model("graduated", {"tiers": TIERS})
    assert model.charge(D(quantity)).amount == D(expected)


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [
        (0, "0"),
        (1, "11.00"),
        (100, "110.00"),  # all 100 units at tier 1's price, with its flat fee
        (101, "50.50"),  # all 101 units at 0.50: crossing an edge can lower the bill
        (1000, "500.00"),
        (1001, "100.10"),
        (2000, "200.00"),
    ],
)
def test_volume_prices_all_units_at_the_reached_tier(quantity: int, expected: str) -> None:
    model = build_charge_model("volume", {"tiers": TIERS})
    assert model.charge(D(quantity)).amount == D(expected)


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [(0, "0"), (100, "0"), (101, "5"), (1100, "5"), (1101, "10"), (10_100, "50"), (10_101, "55")],
)
def test_package_charges_per_started_block_after_free_units(quantity: int, expected: str) -> None:
    model = build_charge_model("package", {"package_size": 1000, "package_price": "5", "free_units": 100})
    assert model.charge(D(quantity)).amount == D(expected)


def test_percentage_of_the_value_field_plus_a_fixed_fee_per_unit() -> None:
    model = build_charge_model("percentage", {"rate": "0.15", "fixed_fee": "0.50"})
    assert model.charge(D(3), value=D("6000.00")).amount == D("901.50")  # 15 % of 6,000 + 3 × 0.50
    assert model.charge(D(0), value=D(0)).amount == D(0)


def test_per_unit_allows_sub_cent_prices() -> None:
    model = build_charge_model("per_unit", {"unit_price": "0.0000015"})
    assert model.charge(D(1_234_567)).amount == D("1.8518505")  # unrounded: rounding is per invoice line


@pytest.mark.parametrize(
    ("quantity", "expected", "bound"),
    [(100, "5", "minimum"), (500, "5.00", ""), (1000, "10.00", ""), (5000, "20", "maximum")],
)
def test_period_minimum_and_maximum(quantity: int, expected: str, bound: str) -> None:
    model = build_charge_model("per_unit", {"unit_price": "0.01", "minimum": "5", "maximum": "20"})
    charge = model.charge(D(quantity))
    assert (charge.amount, charge.bound_applied) == (D(expected), bound)


@pytest.mark.parametrize(
    ("kind", "properties", "code"),
    [
        ("per_unit", {"unit_price": "-0.01"}, "negative_price"),
        ("per_unit", {}, "missing_property"),
        ("per_unit", {"unit_price": "abc"}, "invalid_number"),
        ("per_unit", {"unit_price": "NaN"}, "invalid_number"),
        (
            "graduated",
            {"tiers": [{"up_to": 100, "unit_price": 1}, {"up_to": 50, "unit_price": 1}, {"unit_price": 1}]},
            "overlapping_tiers",
        ),
        (
            "graduated",
            {"tiers": [{"up_to": 100, "unit_price": 1}, {"up_to": 100, "unit_price": 1}, {"unit_price": 1}]},
            "overlapping_tiers",
        ),
        ("volume", {"tiers": [{"unit_price": 1}, {"up_to": 100, "unit_price": 1}]}, "overlapping_tiers"),
        ("volume", {"tiers": [{"up_to": 100, "unit_price": 1}]}, "unbounded_last_tier"),
        ("volume", {"tiers": []}, "missing_property"),
        ("package", {"package_size": 0, "package_price": 1}, "invalid_package_size"),
        ("percentage", {"rate": 15}, "invalid_rate"),
        ("per_unit", {"unit_price": 1, "minimum": 10, "maximum": 5}, "invalid_bounds"),
        ("flat", {"unit_price": 1}, "unknown_charge_model"),
    ],
)
def test_invalid_terms_are_refused_with_a_code(kind: str, properties: dict[str, Any], code: str) -> None:
    with pytest.raises(TermsError) as raised:
        build_charge_model(kind, properties)
    assert raised.value.code == code and raised.value.http_status == 400


prices = st.decimals(min_value=0, max_value=100, places=6)
quantities = st.decimals(min_value=0, max_value=10**7, places=3)


@given(quantities, quantities, prices, prices, prices, st.integers(1, 10**6))
def test_graduated_is_monotone_and_sums_its_tiers(
    a: Decimal, b: Decimal, p1: Decimal, p2: Decimal, p3: Decimal, edge: int
) -> None:
    tiers = [{"up_to": edge, "unit_price": p1}, {"up_to": 2 * edge, "unit_price": p2}, {"unit_price": p3}]
    model = build_charge_model("graduated", {"tiers": tiers})
    low, high = sorted((a, b))
    assert model.charge(low).amount <= model.charge(high).amount
    q, e = high, Decimal(edge)
    by_hand = min(q, e) * p1 + max(min(q, 2 * e) - e, D(0)) * p2 + max(q - 2 * e, D(0)) * p3
    assert model.charge(q).amount == by_hand


@given(quantities, prices)
def test_one_unbounded_tier_is_per_unit(quantity: Decimal, price: Decimal) -> None:
    tiers = [{"unit_price": price}]
    per_unit = build_charge_model("per_unit", {"unit_price": price}).charge(quantity).amount
    assert build_charge_model("graduated", {"tiers": tiers}).charge(quantity).amount == per_unit
    assert build_charge_model("volume", {"tiers": tiers}).charge(quantity).amount == per_unit


@given(quantities, st.decimals(min_value="0.001", max_value=10**4, places=3), prices)
def test_package_charges_whole_blocks_covering_the_quantity(
    quantity: Decimal, size: Decimal, price: Decimal
) -> None:
    amount = (
        build_charge_model("package", {"package_size": size, "package_price": price}).charge(quantity).amount
    )
    blocks = amount / price if price else None
    if blocks is not None:
        assert blocks == blocks.to_integral_value()
        assert (blocks - 1) * size < quantity <= blocks * size or quantity == 0 == blocks
