"""Serializer fields stricter than DRF's defaults."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from treemeter_records.limits import has_forbidden_control

from .periods import parse_month

CONTROL_MESSAGE = "Control characters (other than tab and newline) are not allowed."


class StrictCharField(serializers.CharField):
    """Text only: DRF's CharField turns a JSON number or boolean into a string; this one refuses it."""

    default_error_messages = {"not_a_string": "Must be a string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("not_a_string")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """JSON true or false only: DRF's BooleanField also takes 0, 1, "yes", "on", …"""

    default_error_messages = {"not_a_boolean": "Must be true or false."}

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("not_a_boolean")
        return data


def refuse_control_characters(value: str) -> None:
    """Identifiers (codes, names, client ids) hold no control character other than tab and newline."""
    if has_forbidden_control(value):
        raise serializers.ValidationError(CONTROL_MESSAGE, code="control_character")


class IdentifierField(StrictCharField):
    """A code, name or client-chosen id: a string (StrictCharField) without control characters."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validators.append(refuse_control_characters)


def validate_month(value: str) -> None:
    try:
        parse_month(value)
    except ValueError as error:
        raise serializers.ValidationError(str(error), code="invalid_month") from None


class MonthField(StrictCharField):
    """A month, YYYY-MM (common.periods.parse_month)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validators.append(validate_month)
