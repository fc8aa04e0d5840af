"""Every size limit of the wire format and of JSON bodies, in one place.

The record validator, the platform's model columns that store record input, and the platform's JSON
parser all read these names, so a column can never be narrower than what the format lets through.
"""

from __future__ import annotations

from typing import Any

SLUG_MAX = 64
"""Agent ids, tenants, contracts, packages and SLA classes: ``^[a-z0-9][a-z0-9._-]{0,63}$``."""
TEXT_MAX = 128
"""``client_request_id`` and ``model_id``."""
NODE_MAX = 64
"""A hop's ``node``."""
RECORD_ID_LENGTH = 36
"""A canonical UUID, as text."""
FIELD_PATH_MAX = 128
"""A rejection's field path as stored (longer paths, e.g. deep in ``outcome``, are cut)."""

JSON_MAX_DEPTH = 32
"""Nesting of arrays and objects in any JSON body the platform reads, and in a record's ``outcome``
(a scalar at the top is depth 0, ``{"a": 1}`` is depth 1)."""
JSON_MAX_MEMBERS = 10_000
"""Object members plus array items in one JSON document (a REST body, or one record's ``outcome``)."""

FORBIDDEN_CONTROL = frozenset(chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F))
"""Control characters refused in identifiers: all of C0 and DEL except tab (0x09) and newline (0x0A)."""


def has_forbidden_control(text: str) -> bool:
    """True when ``text`` holds a control character other than tab or newline."""
    return not FORBIDDEN_CONTROL.isdisjoint(text)


def json_limit_problem(
    value: Any, max_depth: int = JSON_MAX_DEPTH, max_members: int = JSON_MAX_MEMBERS
) -> str | None:
    """Why a decoded JSON value exceeds the limits, or None. Iterative: no recursion limit applies."""
    members = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        t = type(item)
        if t is dict or t is list:
            depth += 1
            if depth > max_depth:
                return f"JSON nesting exceeds {max_depth} levels"
            members += len(item)
            if members > max_members:
                return f"JSON holds more than {max_members} members and items"
            for child in item.values() if t is dict else item:
                if type(child) is dict or type(child) is list:
                    push((child, depth))
    return None
