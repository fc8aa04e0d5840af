"""Canonical JSON of the record format v1: sorted keys, no whitespace, raw UTF-8, no floats."""

from __future__ import annotations

import json
from typing import Any


def canonical_bytes(value: Any) -> bytes:
    _no_floats(value)
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def _no_floats(value: Any) -> None:
    if isinstance(value, float):
        raise ValueError("floats are not allowed in canonical JSON")
    if isinstance(value, dict):
        for item in value.values():
            _no_floats(item)
    elif isinstance(value, list):
        for item in value:
            _no_floats(item)
