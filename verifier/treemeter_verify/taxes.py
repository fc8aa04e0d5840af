"""The invoice's subtotal, tax and total re-derived from its lines and its pinned tax terms, with this
verifier's own code (docs/billing.md, "Taxes"):

- the subtotal is the sum of the lines' amounts;
- with the contract's taxes (several per line, each for some line kinds or dimensions): for each tax,
  each line it applies to has an exact tax, amount × rate (exclusive) or amount × rate / (1 + the sum of
  the rates applying to that line) (inclusive); the tax's total is their sum rounded once, half up, to
  the minor unit; the lines' shares are the exact taxes rounded down, plus one minor unit each to the
  largest remainders (earlier lines first on ties); the invoice's tax is the sum of the taxes' totals;
- without them: the single rate, subtotal × rate (exclusive) or × rate / (1 + rate) (inclusive), rounded
  half up;
- the total is the subtotal plus the tax, or the subtotal alone when the prices include the tax.
"""

from __future__ import annotations

from decimal import ROUND_FLOOR, Decimal, InvalidOperation
from typing import Any

from .rating import MINOR_UNITS, round_money


def _applies(tax: dict[str, Any], line: dict[str, Any]) -> bool:
    scope = tax.get("applies_to") or []
    return not scope or line["kind"] in scope or (bool(line["dimension"]) and line["dimension"] in scope)


def line_taxes(
    taxes: list[dict[str, Any]], lines: list[dict[str, Any]], inclusive: bool, currency: str
) -> tuple[list[list[tuple[str, Decimal]]], Decimal]:
    """Each line's (code, amount) taxes in the order of ``taxes``, and the invoice's tax."""
    unit = Decimal(1).scaleb(-MINOR_UNITS[currency])
    rates = [Decimal(t["rate"]) for t in taxes]
    amounts = [Decimal(line["amount"]) for line in lines]
    applying = [[_applies(t, line) for t in taxes] for line in lines]
    shares: list[list[tuple[str, Decimal]]] = [[] for _ in lines]
    invoice_tax = Decimal(0)
    for k, tax in enumerate(taxes):
        exact = []
        for amount, applies in zip(amounts, applying, strict=True):
            share = amount * rates[k] if applies[k] else Decimal(0)
            if applies[k] and inclusive:
                share /= 1 + sum((r for r, a in zip(rates, applies, strict=True) if a), Decimal(0))
            exact.append(share)
        total = round_money(sum(exact, Decimal(0)), currency)
        invoice_tax += total
        floors = [(x / unit).to_integral_value(rounding=ROUND_FLOOR) for x in exact]
        left = int(total / unit - sum(floors, Decimal(0)))
        order = sorted(range(len(exact)), key=lambda n: (-(exact[n] / unit - floors[n]), n))
        for n in order[:left]:
            floors[n] += 1
        for n, units in enumerate(floors):
            if applying[n][k]:
                shares[n].append((tax["code"], units * unit))
    return shares, invoice_tax


def totals_problems(invoice: dict[str, Any]) -> tuple[list[str], str]:
    """What is wrong with the invoice's subtotal, tax and total (and each line's taxes), and what was
    checked when nothing is."""
    currency, lines, terms = invoice["currency"], invoice["lines"], invoice["tax_terms"]
    try:
        subtotal, tax, total = (Decimal(invoice[k]) for k in ("subtotal", "tax", "total"))
        summed = sum((Decimal(line["amount"]) for line in lines), Decimal(0))
    except (InvalidOperation, TypeError):
        return ["the invoice's figures are not decimals"], ""
    problems = []
    if summed != subtotal:
        problems.append(f"subtotal {subtotal} {currency} but the lines add up to {summed}")
    inclusive = bool(terms["inclusive"])
    if terms["taxes"]:
        shares, expected = line_taxes(terms["taxes"], lines, inclusive, currency)
        for number, (line, found) in enumerate(zip(lines, shares, strict=True), 1):
            stated = [(t["code"], Decimal(t["amount"])) for t in line.get("taxes", [])]
            if stated != found:
                problems.append(
                    f"line {number} ({line['kind']} {line['dimension']}) states taxes "
                    f"{_text(stated)} but its terms give {_text(found)}"
                )
        rule = f"{len(terms['taxes'])} taxes per line"
    else:
        rate = Decimal(terms["rate"])
        expected = round_money(subtotal * (rate / (1 + rate) if inclusive else rate), currency)
        rule = f"{rate} on the subtotal"
    if tax != expected:
        problems.append(
            f"tax {tax} {currency} but the terms give {expected} (off by {tax - expected} {currency})"
        )
    due = subtotal if inclusive else subtotal + tax
    if total != due:
        problems.append(f"total {total} {currency} but subtotal and tax give {due}")
    how = "included in the prices" if inclusive else "added"
    return problems, f"subtotal {subtotal} + tax {tax} ({rule}, {how}) = total {total} {currency}"


def _text(taxes: list[tuple[str, Decimal]]) -> str:
    return ", ".join(f"{code} {amount}" for code, amount in taxes) or "none"
