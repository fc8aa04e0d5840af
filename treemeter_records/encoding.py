"""Canonical byte encoding of records and batch headers.

The definition is the stdlib form::

    json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
               allow_nan=False).encode("utf-8")

restricted to JSON values without floats and with integers in the signed 64-bit range, so any
language can reproduce it. ``canonical_bytes_fast`` (orjson) gives the same bytes for such values
(tests/records prove it, per code point and with hypothesis); ``matches_canonical`` uses it on the
ingest hot path and falls back to the definition before declaring a mismatch.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from .errors import CanonicalEncodingError

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1

_ORJSON_OPTS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def _path(parent: str, key: object) -> str:
    return f"{parent}[{key}]" if isinstance(key, int) else f"{parent}.{key}"


def check_canonical_value(obj: Any) -> None:
    """Raise ``CanonicalEncodingError`` unless ``obj`` is a float-free JSON value.

    Allowed: dict with str keys, list/tuple, str, int in [-2**63, 2**63), bool, None.
    Iterative, so deeply nested values cannot hit the recursion limit.
    """
    stack: list[tuple[Any, str]] = [(obj, "$")]
    pop, push = stack.pop, stack.append
    while stack:
        value, path = pop()
        t = type(value)
        if t is str or t is bool or value is None:
            continue
        if t is int:
            if not INT_MIN <= value <= INT_MAX:
                raise CanonicalEncodingError(f"integer at {path} is outside the signed 64-bit range")
        elif t is dict:
            for key, item in value.items():
                if type(key) is not str:
                    raise CanonicalEncodingError(f"non-string key {key!r} at {path}")
                push((item, _path(path, key)))
        elif t is list or t is tuple:
            for i, item in enumerate(value):
                push((item, _path(path, i)))
        elif t is float:
            raise CanonicalEncodingError(
                f"float at {path} is not allowed in canonical JSON; encode decimals as strings"
            )
        else:
            raise CanonicalEncodingError(f"unsupported type {t.__name__} at {path}")


def canonical_bytes(obj: Any) -> bytes:
    """The canonical encoding of ``obj`` (the definition; see the module docstring)."""
    check_canonical_value(obj)
    try:
        text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalEncodingError(f"string is not valid Unicode (lone surrogate?): {exc}") from exc
    except ValueError as exc:  # circular reference
        raise CanonicalEncodingError(str(exc)) from exc


def canonical_bytes_fast(obj: Any) -> bytes:
    """orjson's compact sorted encoding: equal to ``canonical_bytes`` for valid values.

    It does no type policing (orjson would encode floats, UUIDs, enums...), so only use it on
    values that already passed validation, e.g. a record parsed by orjson and validated.
    """
    try:
        return orjson.dumps(obj, option=_ORJSON_OPTS)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise CanonicalEncodingError(str(exc)) from exc


def matches_canonical(line: bytes, obj: Any) -> bool:
    """True when ``line`` is exactly the canonical encoding of ``obj`` (fast path first)."""
    try:
        if canonical_bytes_fast(obj) == line:
            return True
        return canonical_bytes(obj) == line
    except CanonicalEncodingError:
        return False
