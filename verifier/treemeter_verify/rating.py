"""Re-rating: the quantity of each priced dimension from the records, times the contract price.

Mirrors the platform's dimension definitions: only records with status "ok" are billable; amounts
round half up to the currency's minor unit.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from typing import Any

MINOR_UNITS = {"CNY": 2, "USD": 2, "EUR": 2, "GBP": 2, "HKD": 2, "SGD": 2, "JPY": 0, "KRW": 0}
DIMENSIONS = (
    "requests",
    "tokens_in",
    "tokens_out",
    "cached_tokens",
    "cache_write_tokens",
    "expert_tokens",
    "routing_hops",
    "l2_misses",
    "l3_seconds",
    "distinct_experts",
    "outcomes",
)
SCALE = {"l3_seconds": Decimal(1_000_000)}
# The records' optional field (formats v1 and v2): present only from 1 on, absent means 0.
CACHE_WRITES = "prefix_cache_write_tokens"
U32 = 2**32


def cache_writes(record: dict[str, Any]) -> int:
    """A record's ``prefix_cache_write_tokens``: 0 when absent; ValueError unless the format's rules hold
    (an int, not a bool, 1 <= x < 2**32, and with the prefix-cache hits at most ``tokens_in``)."""
    if CACHE_WRITES not in record:
        return 0
    writes = record[CACHE_WRITES]
    if type(writes) is not int or not 0 < writes < U32:
        raise ValueError(f"{CACHE_WRITES} must be an integer in [1, 2**32) when present")
    if record["prefix_cache_hit_tokens"] + writes > record["tokens_in"]:
        raise ValueError(f"prefix_cache_hit_tokens + {CACHE_WRITES} exceeds tokens_in")
    return writes


def usage_of(record: dict[str, Any]) -> tuple[int, ...]:
    """The integer usage of one record, in DIMENSIONS order (l3 in µs)."""
    hops = record["hops"]
    return (
        1,
        record["tokens_in"],
        record["tokens_out"],
        record["prefix_cache_hit_tokens"],
        cache_writes(record),
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


ZERO = Decimal(0)
CHARGE_MODELS = ("per_unit", "graduated", "volume", "package", "percentage")


def _number(properties: dict[str, Any], key: str) -> Decimal:
    raw = properties.get(key)
    return ZERO if raw is None else Decimal(str(raw))


def _tiers(properties: dict[str, Any]) -> list[tuple[Decimal | None, Decimal, Decimal]]:
    """(up to, unit price, flat fee) of each tier, the last one unbounded."""
    return [
        (
            None if t.get("up_to") is None else Decimal(str(t["up_to"])),
            _number(t, "unit_price"),
            _number(t, "flat_fee"),
        )
        for t in properties["tiers"]
    ]


def _model_amount(
    charge_model: str, properties: dict[str, Any], billable: Decimal, value: Decimal
) -> Decimal:
    """The unrounded amount of `billable` units (and, for `percentage`, their `value`) before bounds."""
    if charge_model == "per_unit":
        return billable * _number(properties, "unit_price")
    if charge_model == "graduated":  # each tier prices its own units, plus its flat fee once entered
        amount, lower = ZERO, ZERO
        for up_to, price, flat in _tiers(properties):
            if billable <= lower:
                break
            upper = billable if up_to is None else min(billable, up_to)
            amount += (upper - lower) * price + flat
            if up_to is None:
                break
            lower = up_to
        return amount
    if charge_model == "volume":  # the tier the whole quantity reaches prices every unit
        if billable <= 0:
            return ZERO
        up_to, price, flat = next(t for t in _tiers(properties) if t[0] is None or billable <= t[0])
        return billable * price + flat
    if charge_model == "package":  # per started block after the free units
        paid = max(billable - _number(properties, "free_units"), ZERO)
        blocks = (paid / _number(properties, "package_size")).to_integral_value(rounding=ROUND_CEILING)
        return blocks * _number(properties, "package_price")
    if charge_model == "percentage":
        return value * _number(properties, "rate") + billable * _number(properties, "fixed_fee")
    raise ValueError(f"unknown charge model {charge_model!r}")


def charge_amount(terms: dict[str, Any], quantity: Decimal, value: Decimal, currency: str) -> Decimal:
    """One dimension's line, re-rated: the included quota comes off first (above it, a percentage
    charge takes the billable units' pro-rata part of the value), the charge model prices the rest,
    then the period minimum or maximum, rounded once, half up, to the minor unit."""
    properties = terms["properties"]
    included = Decimal(str(terms.get("included_quantity") or 0))
    billable = max(quantity - included, ZERO)
    if included and quantity:
        value = value * billable / quantity
    amount = _model_amount(terms["charge_model"], properties, billable, value)
    if properties.get("minimum") is not None and amount < Decimal(str(properties["minimum"])):
        amount = Decimal(str(properties["minimum"]))
    elif properties.get("maximum") is not None and amount > Decimal(str(properties["maximum"])):
        amount = Decimal(str(properties["maximum"]))
    return round_money(amount, currency)


def amount_problems(amount: Decimal, expected: Decimal, currency: str) -> list[str]:
    """The problem of a line whose amount is not what its pinned terms give, or none."""
    if amount == expected:
        return []
    off = amount - expected
    return [f"amount {amount} {currency} but the pinned terms give {expected} (off by {off} {currency})"]


def priced_as(terms: dict[str, Any]) -> str:
    """How a line's quantity was priced, as its verdict says it: "× 12.50" or "at graduated"."""
    if terms["charge_model"] == "per_unit":
        return f"× {terms['properties'].get('unit_price')}"
    return f"at {terms['charge_model']}"


def _range_amount(
    terms: dict[str, Any], first: Decimal, last: Decimal, total: Decimal, value: Decimal
) -> Decimal:
    """The unrounded amount of the billable units at tier positions (first, last] of the period's
    billable ``total``, without period bounds; a percentage charge takes ``value``, their share of the
    period's value."""
    if last <= first:
        return ZERO
    model, properties = terms["charge_model"], terms["properties"]
    if model == "percentage":
        return _model_amount(model, properties, last - first, value)
    if model == "volume":  # the period's total picks the tier; its flat fee is shared pro rata
        _, price, flat = next(t for t in _tiers(properties) if t[0] is None or total <= t[0])
        return (last - first) * price + flat * (last - first) / total
    return _model_amount(model, properties, last, ZERO) - _model_amount(model, properties, first, ZERO)


def segment_amounts(
    segments: list[tuple[dict[str, Any], Decimal]],
    newest: dict[str, Any],
    currency: str,
    value: Decimal = ZERO,
) -> tuple[list[Decimal], Decimal | None]:
    """A dimension whose price changed within the period: each version's line from its terms and its
    segment's quantity, in time order, and the bound line's amount (None without one). The newest
    version's included quantity is consumed first by the earliest usage; tiers run on the period's
    cumulative billable quantity, each segment priced by its own version; the newest version's period
    minimum or maximum bounds the total, as one more line. A percentage charge takes each segment's
    billable share of the period's ``value``."""
    included = Decimal(str(newest.get("included_quantity") or 0))
    total = sum((quantity for _, quantity in segments), ZERO)
    billable_total = max(total - included, ZERO)
    amounts, rated, used = [], ZERO, ZERO
    for terms, quantity in segments:
        first = max(used - included, ZERO)
        used += quantity
        last = max(used - included, ZERO)
        share = value * (last - first) / total if total else ZERO
        amount = _range_amount(terms, first, last, billable_total, share)
        rated += amount
        amounts.append(round_money(amount, currency))
    properties = newest["properties"]
    bound = None
    if properties.get("minimum") is not None and rated < Decimal(str(properties["minimum"])):
        bound = Decimal(str(properties["minimum"]))
    elif properties.get("maximum") is not None and rated > Decimal(str(properties["maximum"])):
        bound = Decimal(str(properties["maximum"]))
    if bound is None:
        return amounts, None
    return amounts, round_money(bound, currency) - sum(amounts, ZERO)
