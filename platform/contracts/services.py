"""Writes for contract terms (validation errors are pricing.errors.TermsError: HTTP 400, stable codes).
A new price version's instant is checked by contracts.versions, billing's invoiced-period guard included;
the quota watch that publishes `quota.exhausted` measures usage, so it lives in billing.quotas."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction

from accounts.validators import SLUG_CODE
from catalog.models import PlanPrice
from pricing.charge_models import PER_UNIT
from pricing.dimensions import CATALOGUE_DIMENSIONS, Dimension
from pricing.errors import BillingError, TermsError
from pricing.expressions import parse_metric
from pricing.line_kinds import CREDITABLE_KINDS, LineKind
from pricing.validation import catalogue_priced, validate_charge

from .models import Contract, ContractMetric, ContractPrice, ContractTax
from .versions import check_price_version


def check_currency(contract: Contract, currency: str | None) -> None:
    """Amounts sent with a currency must be in the contract's one currency."""
    if currency is not None and currency != contract.currency:
        raise TermsError(
            "currency_mismatch",
            f"Contract {contract.code} is billed in {contract.currency}, not {currency}.",
            {"contract_currency": contract.currency, "currency": currency},
        )


def _signed_decimal(value: Any, name: str) -> Decimal:
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise TermsError(
            "invalid_number", f"{name!r} is not a number: {value!r}.", {"property": name}
        ) from None
    if not number.is_finite():
        raise TermsError("invalid_number", f"{name!r} must be finite.", {"property": name})
    return number


def _decimal(value: Any, name: str) -> Decimal:
    number = _signed_decimal(value, name)
    if number < 0:
        raise TermsError("negative_price", f"{name!r} must not be negative ({number}).", {"property": name})
    return number


def set_charge(
    contract: Contract,
    dimension: str,
    charge_model: str = "per_unit",
    *,
    unit_price: Any = None,
    properties: dict[str, Any] | None = None,
    included_quantity: Any = 0,
    currency: str | None = None,
    effective_from: datetime | None = None,
) -> ContractPrice:
    """Create or replace the charge for one dimension (idempotent: the same call again changes nothing).

    Without `effective_from` it is the dimension's initial version, replaced in place. With it, a new
    version from that instant (`check_price_version`); a version once written at an instant is not
    replaced by a different one (409 `price_version_exists`): finalised invoices keep their own copy,
    but open periods would silently change price."""
    check_currency(contract, currency)
    properties = dict(properties or {})
    if charge_model == "per_unit":
        raw = unit_price if unit_price is not None else properties.get("unit_price")
        if raw is None:
            raise TermsError(
                "missing_property", "A per-unit charge needs 'unit_price'.", {"property": "unit_price"}
            )
        properties["unit_price"] = str(_decimal(raw, "unit_price"))
    validate_charge(dimension, charge_model, properties, contract.priced_codes())
    if contract.price_by_catalogue and dimension in CATALOGUE_DIMENSIONS:
        raise catalogue_priced([dimension])
    included = _decimal(included_quantity, "included_quantity")
    values = {
        "charge_model": charge_model,
        "unit_price": Decimal(properties.pop("unit_price")) if charge_model == "per_unit" else Decimal(0),
        "properties": properties,
        "included_quantity": included,
    }
    with transaction.atomic():
        # The contract row, as generate_invoice takes it: no period is finalised while a version is added.
        list(Contract.objects.select_for_update().filter(pk=contract.pk).values_list("pk", flat=True))
        if effective_from is not None:
            effective_from = check_price_version(contract, dimension, effective_from)
        if effective_from is None:
            price, _ = ContractPrice.objects.update_or_create(
                contract=contract, dimension=dimension, effective_from=None, defaults=values
            )
            return price
        price, created = ContractPrice.objects.get_or_create(
            contract=contract, dimension=dimension, effective_from=effective_from, defaults=values
        )
        if not created and any(getattr(price, name) != value for name, value in values.items()):
            raise BillingError(
                "price_version_exists",
                f"{dimension} already has a different price from {effective_from.isoformat()}.",
                {"dimension": dimension, "effective_from": effective_from.isoformat()},
            )
    return price


def set_plan_charge(contract: Contract, price: PlanPrice) -> ContractPrice:
    """The contract's charge for a dimension as a plan's price template sets it (set_charge's rules)."""
    return set_charge(
        contract,
        price.dimension,
        price.charge_model,
        unit_price=price.unit_price if price.charge_model == PER_UNIT else None,
        properties=price.properties,
        included_quantity=price.included_quantity,
    )


def set_metric(contract: Contract, code: str, name: str, expression: str) -> ContractMetric:
    """Create or replace a custom metric; the expression must compile (TermsError names the position)."""
    if code in Dimension.values:
        raise TermsError("metric_shadows_dimension", f"{code!r} is a built-in dimension.", {"code": code})
    parse_metric(expression)
    metric, _ = ContractMetric.objects.update_or_create(
        contract=contract, code=code, defaults={"name": name, "expression": expression}
    )
    return metric


MAX_TAXES = 8


def set_taxes(contract: Contract, taxes: list[dict[str, Any]]) -> list[ContractTax]:
    """Replace the contract's taxes (billing.taxes: per line, several per line); an empty list goes back
    to the single `tax_rate`. Each `{code, name, rate, applies_to}`: rate 0 ≤ r < 1, `applies_to` line
    kinds or dimensions (the contract's metric codes too); all are checked before any is written.
    Retry: the same list again leaves the same taxes. Finalised invoices keep the taxes they froze."""
    if not isinstance(taxes, list) or len(taxes) > MAX_TAXES:
        raise TermsError("invalid_taxes", f"taxes is a list of at most {MAX_TAXES} taxes.", {})
    targets = {*LineKind.values, *Dimension.values, *contract.metrics.values_list("code", flat=True)}
    rows, codes = [], set()
    for k, tax in enumerate(taxes):
        if not isinstance(tax, dict) or set(tax) - {"code", "name", "rate", "applies_to"}:
            raise TermsError("invalid_tax", f"Tax {k} has only code, name, rate and applies_to.", {"tax": k})
        code, name = tax.get("code"), tax.get("name")
        if not isinstance(code, str) or not SLUG_CODE.match(code) or len(code) > 32 or code in codes:
            raise TermsError("invalid_tax", f"Tax {k} needs a code of its own (a slug).", {"tax": k})
        if not isinstance(name, str) or not name.strip() or len(name) > 100:
            raise TermsError("invalid_tax", f"Tax {k} needs a name of 1 to 100 characters.", {"tax": k})
        rate = _decimal(tax.get("rate"), "rate")
        if rate >= 1 or rate != rate.quantize(Decimal("0.0001")):
            raise TermsError("invalid_tax", f"Tax {k}'s rate is a fraction below 1 (0.06 = 6 %).", {"tax": k})
        applies_to = tax.get("applies_to", [])
        unknown = (
            [x for x in applies_to if x not in targets] if isinstance(applies_to, list) else [applies_to]
        )
        if unknown:
            raise TermsError(
                "invalid_tax",
                f"Tax {k} applies to unknown lines: {unknown!r}.",
                {"tax": k, "unknown": unknown},
            )
        codes.add(code)
        rows.append(ContractTax(contract=contract, code=code, name=name, rate=rate, applies_to=applies_to))
    with transaction.atomic():
        contract.taxes.all().delete()
        return ContractTax.objects.bulk_create(rows)


TERM_FIELDS = {
    "base_fee": "decimal",
    "minimum_commitment": "decimal",
    "tax_rate": "decimal",
    "base_fee_timing": Contract.FeeTiming.values,
    "late_usage_policy": Contract.LateUsage.values,
    "outcome_on_expiry": ["confirm", "revoke"],
    "tax_inclusive": "bool",
    "pause_billing_on_customer_dependency": "bool",
    "price_by_catalogue": "bool",
    "catalogue_adjustment": "adjustment",
    "grace_days": "int",
    "late_usage_days": "int",
    "outcome_window_hours": "int",
    "credit_order": "kinds",
    "outcome_rule": "rule",
}


def update_terms(contract: Contract, changes: dict[str, Any], currency: str | None = None) -> Contract:
    """Change the contract's period terms; every field is checked before any is written. Finalised
    invoices keep the terms they were billed with."""
    check_currency(contract, currency)
    values: dict[str, Any] = {}
    for name, value in changes.items():
        kind = TERM_FIELDS.get(name)
        if kind is None:
            raise TermsError("unknown_term", f"{name!r} is not a contract term.", {"term": name})
        values[name] = _term_value(name, kind, value)
    if values.get("price_by_catalogue"):
        priced = contract.prices.filter(dimension__in=CATALOGUE_DIMENSIONS).values_list(
            "dimension", flat=True
        )
        if priced:
            raise catalogue_priced(sorted(set(priced)))
    for name, value in values.items():
        setattr(contract, name, value)
    contract.save(update_fields=list(values))
    return contract


# (decimal places, exclusive upper bound) of the decimal terms, as their columns store them.
DECIMAL_TERMS = {
    "base_fee": (8, Decimal(10) ** 12),
    "minimum_commitment": (2, Decimal(10) ** 18),
    "tax_rate": (4, Decimal(1)),
}


# The catalogue adjustment: a fraction, from -1 (free) to below 10 (a 1,000 % markup), 4 places.
ADJUSTMENT_PLACES, ADJUSTMENT_BOUNDS = 4, (Decimal(-1), Decimal(10))


def _term_value(name: str, kind: Any, value: Any) -> Any:
    if kind == "adjustment":
        number = _signed_decimal(value, name)
        low, high = ADJUSTMENT_BOUNDS
        if not low <= number < high or number != number.quantize(Decimal(1).scaleb(-ADJUSTMENT_PLACES)):
            raise TermsError(
                "invalid_term",
                f"{name!r} is a fraction from {low} to below {high} (0.10: 10 % markup, -0.15: 15 % "
                f"discount) with at most {ADJUSTMENT_PLACES} decimals.",
                {"term": name},
            )
        return number
    if kind == "decimal":
        number = _decimal(value, name)
        places, bound = DECIMAL_TERMS[name]
        if number >= bound or number != number.quantize(Decimal(1).scaleb(-places)):
            raise TermsError(
                "invalid_term",
                f"{name!r} takes at most {places} decimals and stays below {bound}.",
                {"term": name},
            )
        return number
    if kind in ("int", "bool"):
        expected = bool if kind == "bool" else int
        if not isinstance(value, expected) or (kind == "int" and (isinstance(value, bool) or value < 0)):
            raise TermsError(
                "invalid_term",
                f"{name!r} must be a {'boolean' if kind == 'bool' else 'whole number ≥ 0'}.",
                {"term": name},
            )
        return value
    if kind == "kinds":
        if not isinstance(value, list) or any(k not in CREDITABLE_KINDS for k in value):
            raise TermsError(
                "invalid_term",
                f"'credit_order' lists line kinds: {', '.join(CREDITABLE_KINDS)}.",
                {"term": name},
            )
        return value
    if kind == "rule":
        if value:
            parse_metric(str(value), rule=True)
        return str(value)
    if value not in kind:
        raise TermsError(
            "invalid_term", f"{name!r} is one of {', '.join(kind)}, not {value!r}.", {"term": name}
        )
    return value
