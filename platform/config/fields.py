"""Serializer fields stricter than DRF's defaults."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


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
