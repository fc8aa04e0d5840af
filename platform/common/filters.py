"""List filters: query parameters that narrow a list to the matching rows among those the caller may see.

The rule, the same on every endpoint (docs/api.md): a filter never looks up the object it names. A
filter naming an object the caller cannot see (another tenant's) answers exactly as one naming an object
that does not exist: 200 with an empty list (for the usage answers, an answer over no records). That is
what "the rows I can see that match" means, and it tells an outsider nothing: a 404 for "not yours" next
to a 404 for "no such thing" is only safe while both are always the same, and an empty list needs no
second look-up to make them so.

A filter is a `ListFilter` subclass: its fields validate the parameters (400 `invalid_request`, with
identifiers refused for control characters), and `lookups` says which rows each one keeps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from django.db.models import Model, Q, QuerySet
from rest_framework import serializers
from rest_framework.request import Request

from treemeter_records.limits import SLUG_MAX

from .fields import IdentifierField

M = TypeVar("M", bound=Model)
Lookup = str | Callable[[Any], Q]


def code_filter(help_text: str) -> IdentifierField:
    """A filter naming an object by its code (tenants, contracts, packages share the slug limit)."""
    return IdentifierField(required=False, max_length=SLUG_MAX, help_text=help_text)


class ListFilter(serializers.Serializer):
    """`lookups` maps each field to a queryset lookup (`"contract__code"`) or to a function of the
    validated value giving the Q to keep; every field must have one."""

    lookups: ClassVar[Mapping[str, Lookup]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = getattr(cls, "_declared_fields", {})
        missing = sorted(set(declared) - set(cls.lookups))
        if missing:
            raise TypeError(f"{cls.__name__} has no lookup for {', '.join(missing)}")

    @classmethod
    def narrow(cls, rows: QuerySet[M], request: Request) -> QuerySet[M]:
        """`rows` (what the caller may see) narrowed by the request's filters; 400 for a bad one."""
        params = cls(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        for name, value in params.validated_data.items():
            lookup = cls.lookups[name]
            rows = rows.filter(lookup(value) if callable(lookup) else Q(**{lookup: value}))
        return rows
