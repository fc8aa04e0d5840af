"""Writes to the catalogue: the LLM price catalogue's versions, imported from a LiteLLM file."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from django.db import transaction

from common.money import MINOR_UNITS
from pricing.errors import BillingError, InvalidRequest

from .litellm import ListedPrice, ParsedFile
from .models import ModelPrice

_PRICES = ("input_per_token", "output_per_token", "cache_read_per_token", "cache_write_per_token")


@dataclass(frozen=True)
class ImportResult:
    """What an import did: versions stored, versions already there with the same prices (a retry),
    and the file's entries that are not token-priced models."""

    created: list[str]
    unchanged: list[str]
    skipped: list[str]


def import_model_prices(parsed: ParsedFile, currency: str, effective_from: date) -> ImportResult:
    """Store one version per model of the file, in force from `effective_from` (a UTC day), in
    `currency`. All or nothing. A retry of the same file stores nothing twice (`unchanged`); a model
    that already has a version on that day with other prices is refused (`price_version_exists`,
    409): a stored version may have priced an invoice, so a new price takes a new day."""
    if currency not in MINOR_UNITS:
        raise InvalidRequest("invalid_currency", f"Unsupported currency {currency!r}.", {})
    models = [p.model_id for p in parsed.prices]
    with transaction.atomic():
        stored = {
            m.model_id: m
            for m in ModelPrice.objects.select_for_update().filter(
                currency=currency, effective_from=effective_from, model_id__in=models
            )
        }
        conflicts = [
            p.model_id for p in parsed.prices if p.model_id in stored and not _same(stored[p.model_id], p)
        ]
        if conflicts:
            raise BillingError(
                "price_version_exists",
                f"{conflicts[0]} already has other {currency} prices from {effective_from.isoformat()}; "
                "a new price takes a new effective day.",
                {"models": conflicts},
            )
        new = [p for p in parsed.prices if p.model_id not in stored]
        ModelPrice.objects.bulk_create(
            ModelPrice(
                model_id=p.model_id,
                currency=currency,
                effective_from=effective_from,
                input_per_token=p.input_per_token,
                output_per_token=p.output_per_token,
                cache_read_per_token=p.cache_read_per_token,
                cache_write_per_token=p.cache_write_per_token,
                provider=p.provider,
                mode=p.mode,
            )
            for p in new
        )
    return ImportResult(
        created=[p.model_id for p in new],
        unchanged=[p.model_id for p in parsed.prices if p.model_id in stored],
        skipped=parsed.skipped,
    )


def _same(stored: ModelPrice, listed: ListedPrice) -> bool:
    return all(getattr(stored, name) == getattr(listed, name) for name in _PRICES) and (
        stored.provider,
        stored.mode,
    ) == (listed.provider, listed.mode)
