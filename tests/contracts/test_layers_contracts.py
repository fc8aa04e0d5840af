"""Contracts and catalog sit below billing: they import nothing of it (nor catalog of contracts), and
billing's rule for price versions (none inside an invoiced period) still reaches the admin's forms, the
API and the purchase flow through the guard billing adds to contracts.versions."""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from billing.models import Invoice
from billing.price_versions import refuse_invoiced_periods
from contracts import versions
from contracts.models import Contract, ContractPrice
from contracts.services import set_charge, update_terms
from pricing.errors import BillingError, TermsError
from tests.factories import ContractFactory

PLATFORM = Path(__file__).resolve().parents[2] / "platform"


def _imported(package: str) -> set[str]:
    """The top-level packages every module of `package` imports, wherever the import statement is."""
    found = set()
    for path in (PLATFORM / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


def test_contracts_and_catalog_import_nothing_of_billing() -> None:
    assert not {"billing", "sla", "usage", "frontend", "finance"} & _imported("contracts")
    assert not {"billing", "contracts", "sla", "usage", "frontend", "finance"} & _imported("catalog")
    assert _imported("pricing") <= {
        "__future__",
        "abc",
        "collections",
        "dataclasses",
        "decimal",
        "functools",
        "re",
        "typing",
        "django",
        "common",
    }


def test_billing_adds_its_invoiced_period_guard() -> None:
    assert refuse_invoiced_periods in versions._GUARDS


def _finalised_november(contract: Contract) -> Invoice:
    return Invoice.objects.create(
        contract=contract,
        tenant=contract.tenant,
        period_start=datetime(2026, 11, 1, tzinfo=UTC),
        period_end=datetime(2026, 12, 1, tzinfo=UTC),
        currency="CNY",
        record_count=0,
        total=Decimal(0),
        number="TREEMETER-009999",
        status=Invoice.Status.FINALIZED,
    )


@pytest.mark.django_db
def test_the_admin_form_refuses_a_version_inside_an_invoiced_period() -> None:
    contract = ContractFactory.create(starts_at=datetime(2026, 1, 1, tzinfo=UTC))
    _finalised_november(contract)
    inside = ContractPrice(
        contract=contract,
        dimension="tokens_out",
        unit_price=Decimal(1),
        effective_from=datetime(2026, 11, 20, tzinfo=UTC),
    )
    with pytest.raises(ValidationError, match="period_finalised"):
        inside.full_clean()
    after = ContractPrice(
        contract=contract,
        dimension="tokens_out",
        unit_price=Decimal(1),
        effective_from=datetime(2026, 12, 5, tzinfo=UTC),
    )
    after.full_clean()


@pytest.mark.django_db
def test_the_service_refuses_it_too_with_the_finalised_until() -> None:
    contract = ContractFactory.create(starts_at=datetime(2026, 1, 1, tzinfo=UTC))
    _finalised_november(contract)
    with pytest.raises(BillingError) as error:
        set_charge(contract, "tokens_out", unit_price="1", effective_from=datetime(2026, 11, 20, tzinfo=UTC))
    assert (error.value.code, error.value.http_status) == ("period_finalised", 409)
    assert error.value.details["finalised_until"] == "2026-12-01T00:00:00+00:00"
    assert not contract.prices.exists()


@pytest.mark.django_db
def test_credit_order_takes_the_creditable_line_kinds_only() -> None:
    contract = ContractFactory.create()
    update_terms(contract, {"credit_order": ["discount", "usage"]})
    with pytest.raises(TermsError) as error:
        update_terms(contract, {"credit_order": ["service_credit"]})
    assert error.value.code == "invalid_term"
    assert "usage, base_fee, commitment, adjustment, discount" in error.value.message
