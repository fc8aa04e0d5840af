"""How a report cell reads on the page: localised numbers, UTC times, translated code values."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django import template
from django.utils import formats

from finance.tables import Column

register = template.Library()


@register.filter
def cell(value: Any, column: Column) -> Any:
    if value is None or value == "":
        return "—"
    if column.kind == "timestamp" and isinstance(value, datetime):
        return formats.date_format(value, "Y-m-d H:i")
    if column.kind == "decimal" and isinstance(value, Decimal):
        if column.percent:
            return formats.number_format(value * 100, decimal_pos=2, use_l10n=True) + " %"
        if column.scale == 2:  # money: always its two places
            return formats.number_format(value, decimal_pos=2, use_l10n=True)
        return formats.number_format(_plain(value), use_l10n=True)
    if column.kind == "integer":
        return formats.number_format(value, use_l10n=True)
    return column.labels.get(value, value)


def _plain(value: Decimal) -> Decimal:
    """A quantity without trailing zeros (6.000000 → 6, 0.630000 → 0.63), never in exponent form."""
    normal = value.normalize()
    return normal.quantize(Decimal(1)) if normal.as_tuple().exponent > 0 else normal  # type: ignore[operator]


@register.filter
def numeric(column: Column) -> bool:
    return column.kind in ("decimal", "integer")
