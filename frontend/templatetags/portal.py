"""Template filters for money and quantities in the active language (Django's number formats)."""

from __future__ import annotations

from decimal import Decimal

from django import template
from django.utils.formats import number_format

from common.money import MINOR_UNITS, round_money

from .. import labels

register = template.Library()


@register.filter
def money(amount: Decimal | str | None, currency: str) -> str:
    """`CNY 1,234.50`: always the currency code, rounded to its minor unit, grouped per language."""
    if amount is None or amount == "":
        return ""
    value = round_money(Decimal(amount), currency)
    return f"{currency} {number_format(value, decimal_pos=MINOR_UNITS[currency], force_grouping=True)}"


@register.filter
def quantity(value: Decimal | int | str | None) -> str:
    """A metered quantity, grouped, without trailing zeros (`12,000.5`, not `12000.500000`)."""
    if value is None or value == "":
        return ""
    number = Decimal(value)
    places = max(0, -int(number.normalize().as_tuple().exponent))
    return number_format(number, decimal_pos=places, force_grouping=True)


@register.filter
def dimension_label(code: str) -> str:
    return labels.label(labels.DIMENSIONS, code)


@register.filter
def status_label(code: str) -> str:
    return labels.label(labels.STATUSES, code)


@register.filter
def kind_label(code: str) -> str:
    return labels.label(labels.LINE_KINDS, code)


@register.filter
def payment_label(code: str) -> str:
    return labels.label(labels.PAYMENTS, code)


@register.filter
def action_label(code: str) -> str:
    return labels.label(labels.DISPUTE_ACTIONS, code)


@register.filter
def role_label(code: str) -> str:
    return labels.label(labels.ROLES, code)


@register.filter
def charge_label(code: str) -> str:
    return labels.label(labels.CHARGE_MODELS, code)
