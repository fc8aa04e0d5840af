"""Re-rating: the quantity of each priced dimension from the records, times the contract price.

Mirrors the platform's dimension definitions: only records with status "ok" are billable; amounts
round half up to the currency's minor unit.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

MINOR_UNITS = {"CNY": 2, "USD": 2, "EUR": 2, "GBP": 2, "HKD": 2, "SGD": 2, "JPY": 0, "KRW": 0}
DIMENSIONS = (
    "requests",
    "tokens_in",
    "tokens_out",
    "cached_tokens",
    "expert_tokens",
    "routing_hops",
    "l2_misses",
    "l3_seconds",
    "distinct_experts",
    "outcomes",
)
SCALE = {"l3_seconds": Decimal(1_000_000)}


def usage_of(record: dict[str, Any]) -> tuple[int, ...]:
    """The integer usage of one record, in DIMENSIONS order (l3 in µs)."""
    hops = record["hops"]
    return (
        1,
        record["tokens_in"],
        record["tokens_out"],
        record["prefix_cache_hit_tokens"],
        record["expert_tokens"],
        len(hops),
        record["expert_cache_misses"],
        sum(h["latency_us"] for h in hops if h["layer"].lower() == "l3"),
        record["distinct_experts"],
        1 if isinstance(record["outcome"], dict) and record["outcome"].get("verified") is True else 0,
    )


def quantity(dimension: str, raw: int) -> Decimal:
    return Decimal(raw) / SCALE.get(dimension, Decimal(1))


def round_money(value: Decimal, currency: str) -> Decimal:
    if currency not in MINOR_UNITS:
        raise ValueError(f"unknown currency {currency}")
    return value.quantize(Decimal(1).scaleb(-MINOR_UNITS[currency]), rounding=ROUND_HALF_UP)


def per_unit_amount(quantity: Decimal, terms: dict[str, Any], currency: str) -> Decimal:
    """The per_unit charge model: the included quota comes off, the rest at the unit price, then the
    period minimum/maximum bound, rounded once."""
    properties = terms["properties"]
    billable = max(quantity - Decimal(terms["included_quantity"]), Decimal(0))
    value = billable * Decimal(str(properties["unit_price"]))
    if properties.get("minimum") is not None:
        value = max(value, Decimal(str(properties["minimum"])))
    if properties.get("maximum") is not None:
        value = min(value, Decimal(str(properties["maximum"])))
    return round_money(value, currency)
