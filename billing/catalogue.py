"""A contract priced by the LLM price catalogue: its period's tokens per model and day, and the catalogue
versions they use, pinned into its terms before it is rated (`billing.catalogue_rating`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from catalog.models import ModelPrice
from catalog.selectors import price_versions
from clickhouse_store.queries.billing import CatalogueDay, catalogue_days
from contracts.models import Contract

from .catalogue_rating import version_in_force
from .exclusions import rating_exclusions
from .rating import PeriodUsage
from .terms import CataloguePrice, Terms, decimal_text


def with_catalogue(
    contract: Contract,
    terms: Terms,
    usage: PeriodUsage,
    start: datetime,
    end: datetime,
    *,
    as_of: datetime | None = None,
    versions: Sequence[ModelPrice] | None = None,
) -> tuple[Terms, PeriodUsage]:
    """The terms with the catalogue versions the period's records use (TermsError `no_catalogue_price`
    for a model and day the catalogue does not price), and the usage with their tokens per model and
    day; unchanged for a contract not priced by the catalogue. Usage measured without them (an invoice
    run measures them for all its contracts at once) is measured here, with the exclusions made by
    `as_of`. `versions`: the catalogue versions already read for a batch of contracts (else read here)."""
    if terms.catalogue is None:
        return terms, usage
    days = usage.catalogue
    if days is None:
        owner = {contract.code: contract.tenant.code}
        excluded = rating_exclusions(owner, start, end, as_of).excluded()
        key = (contract.tenant.code, contract.code)
        days = tuple(catalogue_days([key], start, end, excluded)[key])
    if versions is None:
        versions = catalogue_versions(terms.currency, [days], start, end)
    models = {d.model_id for d in days}  # `versions` may be a whole chunk's: pin this contract's only
    pinned = [_pinned(v) for v in versions if v.currency == terms.currency and v.model_id in models]
    used = {
        (v.model_id, v.effective_from) for d in days for v in [version_in_force(pinned, d.model_id, d.day)]
    }
    prices = tuple(v for v in pinned if (v.model_id, v.effective_from) in used)
    return replace(terms, catalogue=replace(terms.catalogue, prices=prices)), replace(usage, catalogue=days)


def catalogue_versions(
    currency: str, usages: Iterable[Iterable[CatalogueDay]], start: datetime, end: datetime
) -> list[ModelPrice]:
    """The catalogue versions in `currency` in force on some day of [start, end) of the models these
    usages used: one read for a batch of contracts."""
    last_day = (end - timedelta(microseconds=1)).date()
    models = {d.model_id for days in usages for d in days}
    return price_versions(currency, models, start.date(), last_day)


def _pinned(version: ModelPrice) -> CataloguePrice:
    """A version as rating uses it: a cache price the catalogue does not state is the input price."""
    read, write = version.cache_read_per_token, version.cache_write_per_token
    return CataloguePrice(
        model_id=version.model_id,
        effective_from=version.effective_from.isoformat(),
        input=decimal_text(version.input_per_token),
        output=decimal_text(version.output_per_token),
        cache_read=decimal_text(read if read is not None else version.input_per_token),
        cache_write=decimal_text(write if write is not None else version.input_per_token),
    )
