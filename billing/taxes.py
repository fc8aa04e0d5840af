"""Tax per invoice line: a line may carry several taxes (e.g. VAT 6 % for IT services and a surcharge
beside it), each exclusive (added to the price) or inclusive (already in it).

**Rounding rule.** For each tax, every line it applies to has an exact tax: its amount × the rate
(exclusive), or its amount × the rate / (1 + the sum of the rates applying to that line) (inclusive).
The tax's total on the invoice is the sum of those, rounded once, half up, to the currency's minor unit;
each line's tax is its exact tax rounded down to the minor unit, and the units left over go one each to
the lines with the largest remainders (earlier lines first on ties), so the lines' taxes add up to the
tax's total exactly. A negative line (a credit, a discount) carries negative tax. With one rate on every
line this is the rounding of subtotal × rate, as an invoice with a single tax always had.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal
from typing import Any

from common.money import MINOR_UNITS, round_money

ZERO = Decimal(0)


@dataclass(frozen=True)
class TaxTerms:
    """One tax of a contract: its code, name, rate (0.06 = 6 %) and the lines it applies to (line kinds
    or dimensions; empty: every line)."""

    code: str
    name: str
    rate: str
    applies_to: tuple[str, ...] = ()

    def applies(self, kind: str, dimension: str) -> bool:
        return (
            not self.applies_to
            or kind in self.applies_to
            or (bool(dimension) and dimension in self.applies_to)
        )

    def as_json(self) -> dict[str, Any]:
        return {"code": self.code, "name": self.name, "rate": self.rate, "applies_to": list(self.applies_to)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaxTerms:
        return cls(data["code"], data["name"], data["rate"], tuple(data.get("applies_to", ())))


@dataclass(frozen=True)
class LineTax:
    """One tax on one line: its code, rate and amount."""

    code: str
    rate: Decimal
    amount: Decimal


@dataclass(frozen=True)
class TaxedLine:
    """The line's amount, kind and dimension: what a tax is computed on."""

    amount: Decimal
    kind: str
    dimension: str


def apportion(total: Decimal, exact: Sequence[Decimal], unit: Decimal) -> list[Decimal]:
    """Signed exact values rounded to `unit` adding up to `total` (their sum rounded): each rounded
    down, then one unit each to the largest remainders, earlier first on ties."""
    units = [(x / unit).to_integral_value(rounding=ROUND_FLOOR) for x in exact]
    left = int(total / unit - sum(units, ZERO))
    for k in sorted(range(len(exact)), key=lambda k: (-(exact[k] / unit - units[k]), k))[:left]:
        units[k] += 1
    return [u * unit for u in units]


def line_taxes(
    taxes: Sequence[TaxTerms], lines: Sequence[TaxedLine], inclusive: bool, currency: str
) -> tuple[list[list[LineTax]], Decimal]:
    """Each line's taxes (in the order of `taxes`) and the invoice's tax, by the rounding rule above."""
    unit = Decimal(1).scaleb(-MINOR_UNITS[currency])
    rates = [Decimal(t.rate) for t in taxes]
    applying = [[t.applies(line.kind, line.dimension) for t in taxes] for line in lines]
    per_line: list[list[LineTax]] = [[] for _ in lines]
    invoice_tax = ZERO
    for k, tax in enumerate(taxes):
        exact = []
        for line, applies in zip(lines, applying, strict=True):
            if not applies[k]:
                exact.append(ZERO)
                continue
            base = line.amount * rates[k]
            if inclusive:
                base /= 1 + sum((r for r, a in zip(rates, applies, strict=True) if a), ZERO)
            exact.append(base)
        total = round_money(sum(exact, ZERO), currency)
        invoice_tax += total
        for n, amount in enumerate(apportion(total, exact, unit)):
            if applying[n][k]:
                per_line[n].append(LineTax(tax.code, rates[k], amount))
    return per_line, invoice_tax
