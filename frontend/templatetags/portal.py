"""Template filters for money and quantities in the active language (Django's number formats)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django import template
from django.utils import formats
from django.utils.formats import number_format

from common.money import MINOR_UNITS, round_money, unit_price_places
from pricing.dimensions import DIMENSION_NAMES
from treemeter_records.timeutil import from_unix_nanos

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
def unit_price(price: Decimal | str | None, currency: str) -> str:
    """`CNY 0.80`, `CNY 0.0002`: at least the currency's minor unit, grouped per language."""
    if price is None or price == "":
        return ""
    value = Decimal(price)
    places = unit_price_places(value, currency)
    return f"{currency} {number_format(value, decimal_pos=places, force_grouping=True)}"


@register.filter
def iso_date(text: str) -> str:
    """An ISO date (`2026-12-04`, as billing.parties gives it) in the active language's short format."""
    return formats.date_format(date.fromisoformat(text), "SHORT_DATE_FORMAT")


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
    return labels.label(DIMENSION_NAMES, code)


@register.filter
def layer_label(code: str) -> str:
    return labels.label(labels.LAYERS, code)


@register.filter
def unit_label(code: str) -> str:
    return str(labels.UNITS.get(code, code))


@register.filter
def status_label(code: str) -> str:
    return labels.label(labels.STATUSES, code)


@register.filter
def promotion_label(code: str) -> str:
    return labels.label(labels.PROMOTIONS, code)


@register.filter
def receipt_status_label(code: str) -> str:
    return labels.label(labels.RECEIPT_STATUSES, code)


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


@register.simple_tag
def period(start: datetime, end: datetime) -> str:
    """A billing period for a reader: whole UTC days as first – last day (the stored end is exclusive),
    anything shorter or not on day boundaries with its times, in UTC."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    midnight = (0, 0, 0, 0)
    if all((t.hour, t.minute, t.second, t.microsecond) == midnight for t in (start, end)) and end > start:
        last = end - timedelta(days=1)
        first_text = formats.date_format(start, "SHORT_DATE_FORMAT")
        if last.date() == start.date():
            return f"{first_text} (UTC)"
        return f"{first_text} – {formats.date_format(last, 'SHORT_DATE_FORMAT')} (UTC)"
    end_text = f"{end:%H:%M:%S}"
    if end.date() != start.date():
        end_text = f"{formats.date_format(end, 'SHORT_DATE_FORMAT')} {end_text}"
    return f"{formats.date_format(start, 'SHORT_DATE_FORMAT')} {start:%H:%M:%S} – {end_text} UTC"


@register.filter
def ns_time(nanos: int) -> str:
    """A record's nanosecond timestamp as UTC date and time to the millisecond."""
    instant = from_unix_nanos(int(nanos))
    return f"{instant:%Y-%m-%d %H:%M:%S}.{instant.microsecond // 1000:03d}"


@register.filter
def ms(micros: int) -> str:
    """Microseconds as milliseconds, one decimal, in the active language's number format."""
    return number_format(Decimal(int(micros)) / 1000, decimal_pos=1)


@register.filter
def percent(fraction: Decimal | None) -> str:
    """A fraction (0.25) as a percentage (25.0000 %)."""
    return "" if fraction is None else f"{number_format(Decimal(fraction) * 100, decimal_pos=4)} %"
