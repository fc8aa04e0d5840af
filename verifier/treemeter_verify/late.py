"""Late-usage adjustment lines, re-rated from the adjusted invoice's pinned terms (docs/billing.md,
"Late usage").

A record that reaches the log after its period's invoice was finalised is billed on a later invoice, as
an adjustment line: what the old period's usage costs now, less what was billed for it before (the old
invoice and earlier adjustments), priced by the terms the old invoice froze. The export pins those
terms under ``earlier_terms`` (by invoice number), and each adjustment line states, under
``late_usage``, what it re-rates:

- a dimension priced by the contract (``rerated``): the versions in effect, the quantity each priced
  before and after the late records, the period's value (a percentage charge), and whether the period
  was rated per version (``segmented``) or in one line. The amount must be the rating of ``after`` less
  the rating of ``before`` (``rating.charge_amount`` or ``rating.segment_amounts``), the quantity their
  difference;
- tokens priced by the catalogue (``billed_before``): the tokens and the amount billed before. The
  amount must be (tokens before + late tokens) × the old invoice's pinned list price × (1 + adjustment),
  rounded once, half up, less the amount billed before.

The quantities before and after are stated by the platform: the late records belong to the old period,
whose records are not in this export. So the verdict checks the arithmetic and the terms, not the count.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from .catalogue import KINDS, MILLION
from .credits import Finding, plain, stated_decimal
from .rating import charge_amount, round_money, segment_amounts

ZERO = Decimal(0)
STATED = (
    "the quantities before and after are stated by the platform: the old period's records are not in "
    "this export"
)


def late_usage_findings(invoice: dict[str, Any], earlier: dict[str, Any]) -> list[Finding]:
    """One verdict per adjustment line; ``earlier``: the export's ``earlier_terms``."""
    out = []
    currency = invoice["currency"]
    for line in invoice["lines"]:
        if line["kind"] != "adjustment":
            continue
        check = f"line adjustment {line['dimension']}"
        stated = line.get("late_usage")
        if stated is None or ("rerated" not in stated and "billed_before" not in stated):
            detail = "an adjustment made before adjustments stated what they re-rate: not re-rated"
            out.append(Finding(check, None, detail))
            continue
        terms = earlier.get(stated.get("invoice"))
        if terms is None:
            out.append(Finding(check, [f"the export pins no terms of invoice {stated.get('invoice')}"], ""))
            continue
        try:
            if "billed_before" in stated:
                out.append(Finding(check, *_catalogue_line(line, stated, terms, currency)))
            else:
                out.append(Finding(check, *_priced_line(line, stated, terms, currency)))
        except (ValueError, KeyError, TypeError, IndexError) as error:
            out.append(Finding(check, [f"the adjustment's details cannot be read: {error!r}"], ""))
    return out


def _rate(
    versions: list[dict[str, Any]], segmented: bool, quantities: list[Decimal], value: Decimal, currency: str
) -> Decimal:
    """What the old invoice's rating gives for these per-version quantities."""
    if not segmented:
        return charge_amount(versions[-1], quantities[-1], value, currency)
    amounts, bound = segment_amounts(
        list(zip(versions, quantities, strict=True)), versions[-1], currency, value
    )
    return sum(amounts, ZERO) + (bound or ZERO)


def _priced_line(
    line: dict[str, Any], stated: dict[str, Any], terms: dict[str, Any], currency: str
) -> tuple[list[str], str]:
    rerated, number = stated["rerated"], stated["invoice"]
    pinned = terms["prices"].get(line["dimension"])
    if pinned is None:
        return [f"invoice {number} prices no {line['dimension']}"], ""
    by_version = {v["effective_from"]: v for v in pinned["versions"]}
    names = rerated["versions"]
    if not names or any(name not in by_version for name in names):
        return [f"the line names price versions invoice {number} does not pin"], ""
    versions = [by_version[name] for name in names]
    before = [stated_decimal(q) for q in rerated["before"]]
    after = [stated_decimal(q) for q in rerated["after"]]
    if not len(before) == len(after) == len(versions):
        return ["the quantities before and after do not match the versions"], ""
    value, segmented = stated_decimal(rerated["value"]), bool(rerated["segmented"])
    expected = _rate(versions, segmented, after, value, currency) - _rate(
        versions, segmented, before, value, currency
    )
    late = sum(after, ZERO) - sum(before, ZERO)
    quantity, amount = stated_decimal(line["quantity"]), stated_decimal(line["amount"])
    problems = []
    if quantity != late:
        problems.append(f"quantity {plain(quantity)} but before and after differ by {plain(late)}")
    if amount != expected:
        problems.append(
            f"amount {amount} {currency} but invoice {number}'s terms give {expected} "
            f"(off by {amount - expected} {currency})"
        )
    good = (
        f"{plain(late)} late in {stated.get('period_start', '')[:7]} ({number}): "
        f"{plain(sum(before, ZERO))} → {plain(sum(after, ZERO))} under its pinned terms = {amount} "
        f"{currency}; {STATED}"
    )
    return problems, good


def _catalogue_line(
    line: dict[str, Any], stated: dict[str, Any], terms: dict[str, Any], currency: str
) -> tuple[list[str], str]:
    number, listed, before = stated["invoice"], line["catalogue"], stated["billed_before"]
    catalogue = terms["catalogue"]
    if catalogue is None:
        return [f"invoice {number} was not priced by the catalogue"], ""
    model, since = listed["model_id"], listed["effective_from"]
    version = next(
        (p for p in catalogue["prices"] if p["model_id"] == model and p["effective_from"] == since), None
    )
    if version is None:
        return [f"invoice {number} pins no catalogue price of {model} from {since}"], ""
    kind = dict(KINDS).get(line["dimension"])
    if kind is None:
        return [f"{line['dimension']} is not a token kind of the catalogue"], ""
    late, tokens = int(listed["tokens"]), int(before["tokens"])
    factor = 1 + stated_decimal(catalogue["adjustment"])
    price = stated_decimal(version[kind])
    expected = round_money((tokens + late) * price * factor, currency) - stated_decimal(before["amount"])
    quantity, amount = stated_decimal(line["quantity"]), stated_decimal(line["amount"])
    problems = []
    if quantity != late / MILLION:
        problems.append(
            f"quantity {plain(quantity)} but the line's late tokens are {plain(late / MILLION)} M"
        )
    if amount != expected:
        problems.append(
            f"amount {amount} {currency} but invoice {number}'s pinned price gives {expected} "
            f"(off by {amount - expected} {currency})"
        )
    good = (
        f"{late} late {model} tokens in {stated.get('period_start', '')[:7]} ({number}) at the "
        f"{since} price = {amount} {currency}; {STATED}"
    )
    return problems, good
