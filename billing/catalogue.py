"""A contract priced by the LLM price catalogue: its period's tokens per model and day, and the catalogue
versions they use, pinned into its terms before it is rated (`billing.catalogue_rating`)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from catalog.models import ModelPrice
from catalog.selectors import price_versions
from clickhouse_store.queries.billing import catalogue_days
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
    as_of: datetime | None = None,
) -> tuple[Terms, PeriodUsage]:
    """The terms with the catalogue versions the period's records use (TermsError `no_catalogue_price`
    for a model and day the catalogue does not price), and the usage with their tokens
    per model and day; unchanged for a contract not priced by the catalogue. `as_of`: only exclusions
    made by then apply, as for the rating query."""
    if terms.catalogue is None:
        return terms, usage
    owner = {contract.code: contract.tenant.code}
    excluded = rating_exclusions(owner, start, end, as_of).excluded()
    days = catalogue_days(contract.tenant.code, contract.code, start, end, excluded)
    last_day = (end - timedelta(microseconds=1)).date()
    versions = [
        _pinned(v) for v in price_versions(terms.currency, {d.model_id for d in days}, start.date(), last_day)
    ]
    used = {
        (v.model_id, v.effective_from) for d in days for v in [version_in_force(versions, d.model_id, d.day)]
    }
    pinned = replace(
        terms.catalogue, prices=tuple(v for v in versions if (v.model_id, v.effective_from) in used)
    )
    return replace(terms, catalogue=pinned), replace(usage, catalogue=tuple(days))


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
