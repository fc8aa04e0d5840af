"""Rating: a period's measured usage × contract terms → invoice lines and totals. Pure: no database access.

Rounding rule: every line's amount is rounded once, half up, to the currency's minor unit (CNY 0.01,
JPY 1); the subtotal is the sum of the rounded lines; tax is one more line-level rounding of
subtotal × rate (exclusive) or subtotal × rate / (1 + rate) (inclusive, already in the prices).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from contracts.dimensions import Dimension
from contracts.money import round_money

from .periods import next_period_bounds
from .terms import ChargeTerms, Terms

ZERO = Decimal(0)


@dataclass(frozen=True)
class RatedLine:
    dimension: str
    description: str
    quantity: Decimal
    unit_price: Decimal
    amount: Decimal
    kind: str = "usage"
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PeriodUsage:
    record_count: int
    quantities: dict[str, Decimal]
    values: dict[str, Decimal] = field(default_factory=dict)
    excluded: dict[str, Any] = field(default_factory=dict)  # what exclusions left out, and why


@dataclass(frozen=True)
class RatedInvoice:
    lines: list[RatedLine]
    subtotal: Decimal
    tax: Decimal
    total: Decimal


def rate_charge(charge: ChargeTerms, quantity: Decimal, value: Decimal, currency: str) -> RatedLine:
    """One usage line: the quota comes off first, the charge model prices the rest. Above a quota, a
    percentage charge takes its share of the billable units' part of the value (pro rata)."""
    included = Decimal(charge.included_quantity)
    billable = max(quantity - included, ZERO)
    if included and quantity:
        value = value * billable / quantity
    priced = charge.model().charge(billable, value)
    details: dict[str, Any] = {"charge_model": charge.charge_model}
    if included:
        details["included"] = str(included)
        details["billable"] = str(billable)
    if priced.bound_applied:
        details["bound"] = priced.bound_applied
    if charge.charge_model == "percentage":
        details["value"] = str(value)
    if charge.charge_model == "per_unit":
        unit_price = Decimal(str(charge.properties["unit_price"]))
    else:  # the effective average price per billable unit, for display
        unit_price = (priced.amount / billable).quantize(Decimal("1E-8")) if billable else ZERO
    return RatedLine(
        dimension=charge.dimension,
        description=charge.label,
        quantity=quantity,
        unit_price=unit_price,
        amount=round_money(priced.amount, currency),
        details=details,
    )


def rate_usage(
    quantities: Mapping[str, Decimal], prices: Mapping[str, Decimal], currency: str
) -> list[RatedLine]:
    """Per-unit prices only: one line per priced dimension, in the order dimensions are declared."""
    labels = dict(Dimension.choices)
    return [
        rate_charge(
            ChargeTerms(d, str(labels[d]), "per_unit", {"unit_price": str(prices[d])}),
            quantities.get(d, ZERO),
            ZERO,
            currency,
        )
        for d in Dimension.values
        if d in prices
    ]


def coverage(terms: Terms, start: datetime, end: datetime) -> Decimal:
    """The share of [start, end) the contract runs (1 for a whole period; prorates mid-period changes)."""
    begin = max(start, datetime.fromisoformat(terms.starts_at)) if terms.starts_at else start
    finish = min(end, datetime.fromisoformat(terms.ends_at)) if terms.ends_at else end
    if finish <= begin:
        return ZERO
    return Decimal(int((finish - begin).total_seconds())) / Decimal(int((end - start).total_seconds()))


def _fee_line(terms: Terms, start: datetime, end: datetime, note: str) -> RatedLine | None:
    fee, share = Decimal(terms.base_fee), coverage(terms, start, end)
    if not fee or not share:
        return None
    description = f"Base fee {start:%Y-%m}{note}" + ("" if share == 1 else f" (prorated {share:.4f})")
    return RatedLine(
        dimension="",
        description=description,
        quantity=share,
        unit_price=fee,
        amount=round_money(fee * share, terms.currency),
        kind="base_fee",
        details={"period_start": start.isoformat(), "share": str(share)},
    )


def base_fee_lines(terms: Terms, start: datetime, end: datetime) -> list[RatedLine]:
    """In arrears: the closed period's fee. In advance: the next period's fee, plus the closed period's
    when the contract started in it (it had no earlier invoice to bill it in advance)."""
    if terms.base_fee_timing == "arrears":
        periods = [(start, end, "")]
    else:
        periods = [(*next_period_bounds(end), " (in advance)")]
        if terms.starts_at and datetime.fromisoformat(terms.starts_at) >= start:
            periods.insert(0, (start, end, " (in advance, first period)"))
    return [line for s, e, note in periods if (line := _fee_line(terms, s, e, note)) is not None]


def rate_period(
    terms: Terms,
    usage: PeriodUsage,
    start: datetime,
    end: datetime,
    *,
    coupons_used: Mapping[str, int] | None = None,
    adjustments: list[RatedLine] | None = None,
    credits: list[RatedLine] | None = None,
) -> RatedInvoice:
    """All lines of one period's invoice: usage, late-usage adjustments, base fee, commitment true-up,
    coupon discounts, SLA service credits (negative); then tax, on the subtotal after the credits.
    `coupons_used` counts earlier invoices each coupon discounted."""
    currency = terms.currency
    lines = [
        rate_charge(c, usage.quantities.get(c.dimension, ZERO), usage.values.get(c.dimension, ZERO), currency)
        for c in terms.charges
    ]
    lines += adjustments or []
    fees = base_fee_lines(terms, start, end)
    lines += fees
    committed = round_money(Decimal(terms.minimum_commitment) * coverage(terms, start, end), currency)
    consumed = sum((line.amount for line in lines if line.kind in ("usage", "base_fee")), ZERO)
    if committed > consumed:
        lines.append(
            RatedLine(
                dimension="",
                description=f"Minimum commitment true-up ({committed} committed, {consumed} used)",
                quantity=Decimal(1),
                unit_price=committed - consumed,
                amount=committed - consumed,
                kind="commitment",
                details={"committed": str(committed), "consumed": str(consumed)},
            )
        )
    lines += _discounts(terms, lines, coupons_used or {})
    lines += credits or []
    subtotal = sum((line.amount for line in lines), ZERO)
    rate = Decimal(terms.tax_rate)
    if terms.tax_inclusive:
        tax = round_money(subtotal * rate / (1 + rate), currency)
        total = subtotal
    else:
        tax = round_money(subtotal * rate, currency)
        total = subtotal + tax
    return RatedInvoice(lines=lines, subtotal=subtotal, tax=tax, total=total)


def _discounts(terms: Terms, lines: list[RatedLine], used: Mapping[str, int]) -> list[RatedLine]:
    """Coupons in the order they were added; each discounts what the earlier ones left, never below 0."""
    remaining = sum((line.amount for line in lines), ZERO)
    discounts = []
    for coupon in terms.coupons:
        if coupon.periods is not None and used.get(coupon.code, 0) >= coupon.periods:
            continue
        if coupon.percent_off is not None:
            off = round_money(remaining * Decimal(coupon.percent_off), terms.currency)
            label = f"{Decimal(coupon.percent_off) * 100:.2f} % off"
        else:
            off = min(Decimal(coupon.amount_off or 0), remaining)
            label = f"{coupon.amount_off} off"
        if off <= 0:
            continue
        remaining -= off
        discounts.append(
            RatedLine(
                dimension="",
                description=f"Coupon {coupon.code}: {label}",
                quantity=Decimal(1),
                unit_price=-off,
                amount=-off,
                kind="discount",
                details={"coupon": coupon.code},
            )
        )
    return discounts
