"""The charge checks every writer of prices applies (contract prices, plan price templates, the admin's
forms) and billing's terms repeat before rating: a known dimension and valid charge-model properties."""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from .charge_models import ChargeModel, build_charge_model
from .dimensions import DIMENSION_CODES, DIMENSION_LABELS
from .errors import TermsError


def validate_charge(
    dimension: str, charge_model: str, properties: Mapping[str, Any], codes: Set[str]
) -> ChargeModel:
    """TermsError unless the dimension is built in or one of `codes` (the contract's metric codes and
    business-event units) and the charge model's properties are valid."""
    if dimension not in DIMENSION_LABELS and dimension not in codes:
        raise TermsError(
            "unknown_dimension",
            f"Unknown dimension {dimension!r}: use one of {', '.join(DIMENSION_CODES)}, a metric code "
            "or the business-event unit of a package the contract holds.",
            {"dimension": dimension},
        )
    return build_charge_model(charge_model, properties)


def catalogue_priced(dimensions: list[str]) -> TermsError:
    """The error for a contract priced by the LLM price catalogue that also has a price of its own for
    a dimension the catalogue prices (pricing.dimensions.CATALOGUE_DIMENSIONS): both would bill it."""
    return TermsError(
        "catalogue_dimension_priced",
        f"The catalogue prices {', '.join(dimensions)} of this contract: it has no price of its own "
        "for them.",
        {"dimensions": dimensions},
    )
