"""Rating by the LLM price catalogue: a period's tokens per model and day × the catalogue version in
force on that day × the contract's adjustment. Pure: the versions come pinned in the terms.

Per (model, version) there are up to four charges, one per token kind:
- input tokens that were neither read from nor written to the prefix cache (`tokens_in` − cache reads
  − cache writes), at the input price;
- output tokens, at the output price;
- prefix-cache reads and prefix-cache writes, at their prices (the input price where the catalogue
  states none).

Quantities are shown per million tokens. Each amount is tokens × list price per token × (1 +
adjustment), rounded once, half up, to the currency's minor unit, like every other line; the unit price
shown is that exact price per million, which the line's details carry exactly as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from clickhouse_store.queries.billing import CatalogueDay
from common.money import round_money
from pricing.dimensions import Dimension
from pricing.errors import TermsError

from .terms import CataloguePrice, CatalogueTerms, decimal_text

MILLION = Decimal(1_000_000)


# What each line prices, for its description.
LABELS: dict[str, str] = {
    Dimension.TOKENS_IN: "Input tokens, not cached",
    Dimension.TOKENS_OUT: "Output tokens",
    Dimension.CACHED_TOKENS: "Prefix-cache reads",
    Dimension.CACHE_WRITE_TOKENS: "Prefix-cache writes",
}


@dataclass(frozen=True)
class CatalogueCharge:
    """One token kind of one model under one catalogue version: its tokens and amount."""

    model_id: str
    effective_from: str
    dimension: str
    tokens: int
    list_price: Decimal  # per token
    unit_price: Decimal  # per million tokens, adjusted
    amount: Decimal

    def description(self) -> str:
        return (
            f"{self.model_id}: {LABELS[self.dimension]}, per 1M tokens (catalogue from {self.effective_from})"
        )

    def details(self, adjustment: str, tokens: int | None = None) -> dict[str, object]:
        """What a line of it keeps: the model, version, tokens (`tokens`: of a late-usage line), the
        exact list and adjusted prices."""
        return {
            "model_id": self.model_id,
            "effective_from": self.effective_from,
            "tokens": self.tokens if tokens is None else tokens,
            "list_price_per_token": decimal_text(self.list_price),
            "adjustment": adjustment,
            "unit_price_per_million": decimal_text(self.unit_price),
        }


# (dimension, the price field it is rated at), in line order.
_KINDS = (
    (Dimension.TOKENS_IN, "input"),
    (Dimension.TOKENS_OUT, "output"),
    (Dimension.CACHED_TOKENS, "cache_read"),
    (Dimension.CACHE_WRITE_TOKENS, "cache_write"),
)


def version_in_force(prices: Sequence[CataloguePrice], model_id: str, day: date) -> CataloguePrice:
    """The model's version in force on `day`: the latest to start on or before it; TermsError
    `no_catalogue_price` when the catalogue has none (usage is never billed at a guessed price)."""
    found = None
    for price in prices:
        in_force = price.model_id == model_id and date.fromisoformat(price.effective_from) <= day
        if in_force and (found is None or price.effective_from > found.effective_from):
            found = price
    if found is None:
        raise TermsError(
            "no_catalogue_price",
            f"The price catalogue has no price for model {model_id!r} on {day.isoformat()}.",
            {"model_id": model_id, "day": day.isoformat()},
        )
    return found


def catalogue_charges(
    catalogue: CatalogueTerms, usage: Sequence[CatalogueDay], currency: str
) -> list[CatalogueCharge]:
    """The period's catalogue charges, by model, version and token kind; kinds without tokens left out."""
    tokens: dict[tuple[str, str], dict[str, int]] = {}
    versions: dict[tuple[str, str], CataloguePrice] = {}
    for day in usage:
        version = version_in_force(catalogue.prices, day.model_id, day.day)
        key = (day.model_id, version.effective_from)
        versions[key] = version
        found = tokens.setdefault(key, dict.fromkeys((d for d, _ in _KINDS), 0))
        found[Dimension.TOKENS_IN] += day.tokens_in - day.cache_read - day.cache_write
        found[Dimension.TOKENS_OUT] += day.tokens_out
        found[Dimension.CACHED_TOKENS] += day.cache_read
        found[Dimension.CACHE_WRITE_TOKENS] += day.cache_write
    factor = 1 + Decimal(catalogue.adjustment)
    charges = []
    for key in sorted(tokens):
        version = versions[key]
        for dimension, price_field in _KINDS:
            count = tokens[key][dimension]
            if not count:
                continue
            list_price = Decimal(getattr(version, price_field))
            charges.append(
                CatalogueCharge(
                    model_id=key[0],
                    effective_from=key[1],
                    dimension=dimension,
                    tokens=count,
                    list_price=list_price,
                    unit_price=list_price * MILLION * factor,
                    amount=round_money(count * list_price * factor, currency),
                )
            )
    return charges
