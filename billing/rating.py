"""rate_usage: measured quantities × contract prices → invoice lines. Pure: no database access."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from contracts.dimensions import Dimension
from contracts.money import round_money


@dataclass(frozen=True)
class RatedLine:
    dimension: str
    description: str
    quantity: Decimal
    unit_price: Decimal
    amount: Decimal


def rate_usage(
    quantities: Mapping[str, Decimal], prices: Mapping[str, Decimal], currency: str
) -> list[RatedLine]:
    """One line per priced dimension, in the order dimensions are declared; amount = quantity × price,
    rounded half up to the currency's minor unit."""
    lines = []
    for dimension in Dimension:
        if dimension.value not in prices:
            continue
        quantity = quantities.get(dimension.value, Decimal(0))
        unit_price = prices[dimension.value]
        lines.append(
            RatedLine(
                dimension=dimension.value,
                description=str(dimension.label),
                quantity=quantity,
                unit_price=unit_price,
                amount=round_money(quantity * unit_price, currency),
            )
        )
    return lines
