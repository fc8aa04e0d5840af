"""The charge checks every writer of prices applies (contract prices, plan price templates, the admin's
forms) and billing's terms repeat before rating: a known dimension and valid charge-model properties."""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from .charge_models import ChargeModel, build_charge_model
from .dimensions import DIMENSION_CODES, DIMENSION_LABELS
from .errors import TermsError


def validate_charge(
    dimension: str, charge_model: str, properties: Mapping[str, Any], metric_codes: Set[str]
) -> ChargeModel:
    """TermsError unless the dimension is known and the charge model's properties are valid."""
    if dimension not in DIMENSION_LABELS and dimension not in metric_codes:
        raise TermsError(
            "unknown_dimension",
            f"Unknown dimension {dimension!r}: use one of {', '.join(DIMENSION_CODES)} or a metric code.",
            {"dimension": dimension},
        )
    return build_charge_model(charge_model, properties)
