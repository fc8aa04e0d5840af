"""One registry of charge-model kinds and one of invoice line kinds: every reader takes its list from
them, and an unknown kind is refused."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from billing.models import InvoiceLine
from catalog.models import PlanPrice
from contracts.models import ContractPrice
from frontend import labels
from pricing.charge_models import CHARGE_MODEL_CHOICES, CHARGE_MODELS, KINDS, build_charge_model
from pricing.errors import BillingError, TermsError
from pricing.line_kinds import CREDITABLE_KINDS, LineKind
from pricing.validation import validate_charge
from tests.factories import ContractFactory

VALID: dict[str, dict[str, Any]] = {
    "per_unit": {"unit_price": "0.5"},
    "graduated": {"tiers": [{"up_to": "10", "unit_price": "1"}, {"unit_price": "0.5"}]},
    "volume": {"tiers": [{"up_to": "10", "unit_price": "1"}, {"unit_price": "0.5"}]},
    "package": {"package_size": "100", "package_price": "2"},
    "percentage": {"rate": "0.15"},
}


def test_the_contract_price_choices_are_the_registry() -> None:
    field = ContractPrice._meta.get_field("charge_model")
    assert list(field.choices or ()) == CHARGE_MODEL_CHOICES
    assert [kind for kind, _ in CHARGE_MODEL_CHOICES] == list(KINDS) == list(CHARGE_MODELS)
    assert field.default == "per_unit"
    assert set(VALID) == set(CHARGE_MODELS)  # a new kind gets a case here
    assert set(labels.CHARGE_MODELS) == set(CHARGE_MODELS)  # and a portal label


@pytest.mark.parametrize("kind", list(CHARGE_MODELS))
def test_each_kind_is_built_by_its_own_class(kind: str) -> None:
    model = build_charge_model(kind, VALID[kind])
    assert type(model) is CHARGE_MODELS[kind]
    assert model.kind == kind
    assert model.charge(Decimal(20)).amount >= 0


def test_an_unknown_kind_raises_with_the_known_ones() -> None:
    with pytest.raises(TermsError) as error:
        build_charge_model("flat_rate", {})
    assert error.value.code == "unknown_charge_model"
    assert error.value.details == {"kind": "flat_rate"}
    assert ", ".join(KINDS) in error.value.message
    with pytest.raises(TermsError, match="Unknown charge model"):
        validate_charge("requests", "flat_rate", {}, set())


def test_terms_errors_are_billing_errors_with_400() -> None:
    assert issubclass(TermsError, BillingError)
    assert TermsError.http_status == 400
    assert BillingError.http_status == 409


@pytest.mark.django_db
def test_the_admin_forms_refuse_an_unknown_kind() -> None:
    contract = ContractFactory.create()
    with pytest.raises(ValidationError):
        ContractPrice(contract=contract, dimension="requests", charge_model="flat_rate").full_clean()
    plan_price = PlanPrice(dimension="requests", charge_model="flat_rate")
    with pytest.raises(ValidationError, match="unknown_charge_model"):
        plan_price.clean()


def test_the_invoice_line_kinds_are_the_registry() -> None:
    assert InvoiceLine.Kind is LineKind
    assert list(InvoiceLine._meta.get_field("kind").choices or ()) == LineKind.choices
    assert set(LineKind.values) <= set(labels.LINE_KINDS)  # every kind has a portal label
    assert CREDITABLE_KINDS == ("usage", "base_fee", "commitment", "adjustment", "discount")
