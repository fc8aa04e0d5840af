"""Reads for the catalogue: active packages with their purchasable plans and price templates, and the
LLM price catalogue's versions."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date

from django.db.models import Exists, OuterRef, Prefetch, Q, QuerySet

from accounts.access import Principal

from .litellm import ListedPrice
from .models import ComputePackage, ModelPrice, PackagePlan


def visible_packages(principal: Principal) -> QuerySet[ComputePackage]:
    """The public packages and the principal's tenant's own (its package factory's); staff see all."""
    packages = ComputePackage.objects.all()
    if principal.is_staff:
        return packages
    return packages.filter(Q(owner__isnull=True) | Q(owner_id=principal.tenant_id))


def active_packages(principal: Principal) -> QuerySet[ComputePackage]:
    plans = PackagePlan.objects.filter(active=True).prefetch_related("prices").order_by("code")
    return visible_packages(principal).filter(active=True).prefetch_related(Prefetch("plans", queryset=plans))


def purchasable_plan(principal: Principal, package_code: str, plan_code: str) -> PackagePlan | None:
    """The active plan of an active package the principal sees, or None."""
    return (
        PackagePlan.objects.select_related("package")
        .prefetch_related("prices")
        .filter(
            package__in=visible_packages(principal),
            package__code=package_code,
            package__active=True,
            code=plan_code,
            active=True,
        )
        .first()
    )


def model_prices(currency: str = "", model_id: str = "", as_of: date | None = None) -> QuerySet[ModelPrice]:
    """The catalogue's versions, by model, currency and day; with `as_of`, only the version of each
    model and currency in force on that day (none newer on or before it)."""
    versions = ModelPrice.objects.all()
    if currency:
        versions = versions.filter(currency=currency)
    if model_id:
        versions = versions.filter(model_id=model_id)
    if as_of is None:
        return versions
    newer = ModelPrice.objects.filter(
        model_id=OuterRef("model_id"),
        currency=OuterRef("currency"),
        effective_from__gt=OuterRef("effective_from"),
        effective_from__lte=as_of,
    )
    return versions.filter(effective_from__lte=as_of).exclude(Exists(newer))


def price_versions(currency: str, model_ids: Iterable[str], first: date, last: date) -> list[ModelPrice]:
    """Of these models, in `currency`, the versions in force on some day of [first, last]: each model's
    version in force on `first` and those starting after it, by `last`."""
    models = sorted(set(model_ids))
    versions = list(
        ModelPrice.objects.filter(currency=currency, model_id__in=models, effective_from__lte=last)
    )
    kept: list[ModelPrice] = []
    for model in models:
        own = [v for v in versions if v.model_id == model]
        earlier = [v for v in own if v.effective_from <= first]
        kept += earlier[-1:] + [v for v in own if v.effective_from > first]
    return kept


def listed_prices(currency: str, as_of: date) -> list[ListedPrice]:
    """The versions in force on `as_of` in `currency`, as LiteLLM's file lists them."""
    return [
        ListedPrice(
            model_id=price.model_id,
            input_per_token=price.input_per_token,
            output_per_token=price.output_per_token,
            cache_read_per_token=price.cache_read_per_token,
            cache_write_per_token=price.cache_write_per_token,
            provider=price.provider,
            mode=price.mode,
        )
        for price in model_prices(currency, as_of=as_of)
    ]
