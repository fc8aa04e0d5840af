"""The invoice's lines that do not come from records, re-derived from its pinned commercial terms with
this verifier's own code (docs/billing.md): the base fee, the minimum-commitment true-up and the coupon
discounts.

- **coverage**: the share of the period [start, end) the contract runs, in whole seconds (1 for a whole
  period);
- **base fee**: in arrears, the period's fee × its coverage; in advance, the next period's, plus this
  period's when the contract started in it; each rounded half up to the minor unit;
- **true-up**: the commitment × the coverage, rounded, less what the usage and base-fee lines came to,
  when that is positive;
- **discounts**: the coupons in the order they were added, each on what the earlier ones left of the
  lines before them (usage, late-usage adjustments, base fees, true-up): a percentage rounded half up,
  or a fixed amount never above what is left. A coupon with no line is taken as spent on earlier
  invoices (they are not in this export).
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from .rating import round_money

ZERO = Decimal(0)
DISCOUNTED = ("usage", "adjustment", "base_fee", "commitment")


def _instant(ns: int) -> datetime:
    return datetime.fromtimestamp(ns // 10**9, UTC)


def _next_month(start: datetime) -> datetime:
    return start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)


def coverage(terms: dict[str, Any], start: datetime, end: datetime) -> Decimal:
    begin = max(start, datetime.fromisoformat(terms["starts_at"])) if terms["starts_at"] else start
    finish = min(end, datetime.fromisoformat(terms["ends_at"])) if terms["ends_at"] else end
    if finish <= begin:
        return ZERO
    return Decimal(int((finish - begin).total_seconds())) / Decimal(int((end - start).total_seconds()))


def base_fees(terms: dict[str, Any], start: datetime, end: datetime, currency: str) -> list[Decimal]:
    fee = Decimal(terms["base_fee"])
    if terms["base_fee_timing"] == "arrears":
        periods = [(start, end)]
    else:
        periods = [(end, _next_month(end))]
        if terms["starts_at"] and datetime.fromisoformat(terms["starts_at"]) >= start:
            periods.insert(0, (start, end))
    amounts = []
    for begin, finish in periods:
        share = coverage(terms, begin, finish)
        if fee and share:
            amounts.append(round_money(fee * share, currency))
    return amounts


def commercial_problems(invoice: dict[str, Any]) -> tuple[list[str], str]:
    """What is wrong with the base-fee, true-up and discount lines, and what was checked."""
    terms, currency, lines = invoice["terms"], invoice["currency"], invoice["lines"]
    start, end = _instant(invoice["period_start_ns"]), _instant(invoice["period_end_ns"])
    try:
        amounts = [Decimal(line["amount"]) for line in lines]
    except (InvalidOperation, TypeError):
        return ["the lines' amounts are not decimals"], ""
    kinds = [line["kind"] for line in lines]
    problems = []

    stated_fees = [a for a, k in zip(amounts, kinds, strict=True) if k == "base_fee"]
    fees = base_fees(terms, start, end, currency)
    if stated_fees != fees:
        problems.append(f"base fee lines {_text(stated_fees)} but the terms give {_text(fees)}")

    committed = round_money(Decimal(terms["minimum_commitment"]) * coverage(terms, start, end), currency)
    consumed = sum((a for a, k in zip(amounts, kinds, strict=True) if k in ("usage", "base_fee")), ZERO)
    stated_true_up = [a for a, k in zip(amounts, kinds, strict=True) if k == "commitment"]
    true_up = [committed - consumed] if committed > consumed else []
    if stated_true_up != true_up:
        problems.append(
            f"commitment true-up {_text(stated_true_up)} but {committed} committed and {consumed} used "
            f"give {_text(true_up)}"
        )

    remaining = sum((a for a, k in zip(amounts, kinds, strict=True) if k in DISCOUNTED), ZERO)
    by_code = {coupon["code"]: coupon for coupon in terms["coupons"]}
    for line, amount in zip(lines, amounts, strict=True):
        if line["kind"] != "discount":
            continue
        coupon = by_code.get(line.get("coupon", ""))
        if coupon is None:
            problems.append(f"discount {amount} names no coupon of the terms")
            continue
        if coupon.get("percent_off") is not None:
            off = round_money(remaining * Decimal(coupon["percent_off"]), currency)
        else:
            off = min(Decimal(coupon.get("amount_off") or 0), remaining)
        if amount != -off:
            problems.append(f"coupon {coupon['code']}: {amount} but {_text([-off])} on {remaining} left")
        remaining -= off
    checked = f"base fee {_text(fees)}, true-up {_text(true_up)}, {kinds.count('discount')} discounts"
    return problems, f"{checked} ({currency})"


def _text(amounts: list[Decimal]) -> str:
    return ", ".join(str(a) for a in amounts) or "none"
