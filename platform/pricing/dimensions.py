"""Metered dimensions a contract can price. Each but `outcomes` maps to one whitelisted ClickHouse
aggregate; outcomes are billed from billing.models.Outcome once confirmed (declared in a record or
through the API, pending for the contract's verification window)."""

from __future__ import annotations

from decimal import Decimal

from django.db import models
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _


class Dimension(models.TextChoices):
    REQUESTS = "requests", "Requests"
    TOKENS_IN = "tokens_in", "Input tokens"
    TOKENS_OUT = "tokens_out", "Output tokens"
    CACHED_TOKENS = "cached_tokens", "Prefix-cache hit tokens"
    CACHE_WRITE_TOKENS = "cache_write_tokens", "Prefix-cache write tokens"
    EXPERT_TOKENS = "expert_tokens", "Expert-token activations"
    ROUTING_HOPS = "routing_hops", "Routing hops"
    L2_MISSES = "l2_misses", "Expert-cache misses (L2)"
    L3_SECONDS = "l3_seconds", "GPU time (L3 seconds)"
    DISTINCT_EXPERTS = "distinct_experts", "Distinct experts per request"
    OUTCOMES = "outcomes", "Verified outcomes"


# The codes in declaration order and their labels, built once: `Dimension.values` and `.choices` build a
# new list on every access, which rating does thousands of times per invoice run.
DIMENSION_CODES: tuple[str, ...] = tuple(Dimension.values)
DIMENSION_LABELS: dict[str, str] = dict(Dimension.choices)

# Their names for people, translated (the portal and the finance views; the catalogue is the portal's).
# DIMENSION_LABELS are the English names invoice lines store.
DIMENSION_NAMES: dict[str, Promise] = {
    "requests": _("Requests"),
    "tokens_in": _("Input tokens"),
    "tokens_out": _("Output tokens"),
    "cached_tokens": _("Prefix-cache hit tokens"),
    "cache_write_tokens": _("Prefix-cache write tokens"),
    "expert_tokens": _("Expert-token activations"),
    "routing_hops": _("Routing hops"),
    "l2_misses": _("Expert-cache misses (L2)"),
    "l3_seconds": _("GPU time (L3 seconds)"),
    "distinct_experts": _("Distinct experts per request"),
    "outcomes": _("Verified outcomes"),
}

# The dimensions measured by an integer aggregate over the records (every one but `outcomes`), in the
# order the aggregates are read; their SQL is `clickhouse_store.queries.billing.AGGREGATE_SQL`. Values
# are summed exactly, then scaled below.
AGGREGATED_DIMENSIONS: tuple[str, ...] = tuple(d for d in DIMENSION_CODES if d != Dimension.OUTCOMES)

# Divisor turning the integer aggregate into the billed unit (µs → seconds).
SCALE: dict[str, Decimal] = {Dimension.L3_SECONDS: Decimal(1_000_000)}


def event_unit_label(unit: str) -> str:
    """An invoice line's name for a business-event unit: `contract_review_event` → "Contract review
    events"."""
    words = unit.replace("_", " ").replace("-", " ").strip()
    return (words[:1].upper() + words[1:]) + ("" if words.endswith("s") else "s")


def quantity_from_aggregate(dimension: str, raw: int) -> Decimal:
    return Decimal(raw) / SCALE.get(dimension, Decimal(1))


# What a contract priced by the LLM price catalogue (catalog.ModelPrice) prices from it: per model and
# catalogue version, the input tokens neither read from nor written to the prefix cache, the output
# tokens, the cache reads and the cache writes (billing.catalogue_rating). Such a contract has no
# price of its own for these.
CATALOGUE_DIMENSIONS: tuple[str, ...] = (
    Dimension.TOKENS_IN,
    Dimension.TOKENS_OUT,
    Dimension.CACHED_TOKENS,
    Dimension.CACHE_WRITE_TOKENS,
)


# How an invoice presents a package's usage charges (seed 000: "routing fee 0.002, expert fee 0.015,
# cache compensation 0.003"): each dimension's group, in presentation order. The lines are still priced
# per dimension by the contract; a custom metric is "other usage".
CHARGE_GROUPS: dict[str, str] = {
    Dimension.REQUESTS: "routing",
    Dimension.ROUTING_HOPS: "routing",
    Dimension.TOKENS_IN: "experts",
    Dimension.TOKENS_OUT: "experts",
    Dimension.EXPERT_TOKENS: "experts",
    Dimension.DISTINCT_EXPERTS: "experts",
    Dimension.L3_SECONDS: "experts",
    Dimension.CACHED_TOKENS: "cache",
    Dimension.CACHE_WRITE_TOKENS: "cache",
    Dimension.L2_MISSES: "cache",
    Dimension.OUTCOMES: "outcomes",
}
OTHER_USAGE = "other"
CHARGE_GROUP_NAMES: dict[str, Promise] = {
    "routing": _("Routing fee"),
    "experts": _("Expert fee"),
    "cache": _("Cache compensation"),
    "outcomes": _("Verified outcomes"),
    OTHER_USAGE: _("Other usage"),
}
if set(CHARGE_GROUPS) != set(DIMENSION_CODES) or set(CHARGE_GROUPS.values()) | {OTHER_USAGE} != set(
    CHARGE_GROUP_NAMES
):
    raise RuntimeError("every dimension has a charge group, and every group a name")
