"""One set of hand-computed rating vectors (tests/rating_vectors.json) pins both implementations of the
charge models to the same amounts: the platform's (billing.rating.rate_charge, pricing.charge_models) and
the standalone verifier's own copy (treemeter_verify.rating.charge_amount, which depends on nothing of the
platform), so the verifier re-rates every line of every charge model exactly as the invoice was rated."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from billing.rating import rate_charge
from billing.terms import ChargeTerms
from pricing.charge_models import KINDS
from treemeter_verify.rating import CHARGE_MODELS, charge_amount

VECTORS: list[dict[str, Any]] = json.loads((Path(__file__).parent / "rating_vectors.json").read_text())[
    "vectors"
]


def test_the_vectors_cover_every_charge_model() -> None:
    assert {v["charge_model"] for v in VECTORS} == set(KINDS) == set(CHARGE_MODELS)


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_platform_and_verifier_rate_each_vector_to_its_amount(vector: dict[str, Any]) -> None:
    quantity, value = Decimal(vector["quantity"]), Decimal(vector["value"])
    charge = ChargeTerms(
        "tokens_in", "Input tokens", vector["charge_model"], vector["properties"], vector["included_quantity"]
    )
    platform = rate_charge(charge, quantity, value, vector["currency"]).amount
    terms = {k: vector[k] for k in ("charge_model", "properties", "included_quantity")}
    verifier = charge_amount(terms, quantity, value, vector["currency"])

    assert platform == verifier == Decimal(vector["amount"])
