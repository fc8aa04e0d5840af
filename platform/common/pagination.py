"""Cursor pagination for every list: stable under inserts, `?cursor=` to page, `?limit=` up to 500."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request


class CursorPage(CursorPagination):
    ordering = "-pk"
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 500

    def get_page_size(self, request: Request) -> int:
        """`?limit=` from 1 to 500; anything else is a 400 (DRF would silently use the default)."""
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= self.max_page_size):
            raise ValidationError({"limit": [f"An integer from 1 to {self.max_page_size}."]})
        return int(raw)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        params = super().get_schema_operation_parameters(view)
        for param in params:
            if param["name"] == self.page_size_query_param:
                param["schema"].update({"minimum": 1, "maximum": self.max_page_size})
        return params
