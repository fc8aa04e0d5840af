"""common.errors: every error an API view meets answers {code, message, details}; the schema says so."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError
from django.http import Http404
from django.test import RequestFactory
from drf_spectacular.generators import SchemaGenerator
from rest_framework import exceptions

from common.error_handler import api_exception_handler
from common.errors import document_error_responses, not_found


def _answer(exc: Exception) -> tuple[int, Any]:
    response = api_exception_handler(exc, {})
    assert response is not None
    return response.status_code, response.data


@pytest.mark.parametrize(
    ("exc", "status", "code", "details"),
    [
        (Http404("No Invoice matches the given query."), 404, "not_found", {}),
        (PermissionDenied(), 403, "permission_denied", {}),
        (
            DataError("integer out of range"),
            400,
            "invalid_request",
            {"errors": ["A value is out of range for its field."]},
        ),
        (
            ValueError("A string literal cannot contain NUL (0x00) characters."),
            400,
            "invalid_request",
            {"errors": ["Text must not contain NUL characters."]},
        ),
        (
            DjangoValidationError({"ends_at": ["Ends before it starts."]}),
            400,
            "invalid_request",
            {"ends_at": ["Ends before it starts."]},
        ),
        (exceptions.ValidationError(["one", "two"]), 400, "invalid_request", {"errors": ["one", "two"]}),
        (exceptions.Throttled(wait=12.4), 429, "throttled", {"retry_after_seconds": 13}),  # DRF rounds up
        (exceptions.ParseError(), 400, "parse_error", {}),
    ],
)
def test_errors_answer_the_standard_shape(exc: Exception, status: int, code: str, details: Any) -> None:
    answered, body = _answer(exc)
    assert (answered, body["code"], body["details"]) == (status, code, details)
    assert isinstance(body["message"], str) and body["message"]


def test_an_unknown_exception_is_left_to_django_as_a_500() -> None:
    assert api_exception_handler(RuntimeError("bug"), {}) is None
    assert api_exception_handler(ValueError("invalid literal for int() with base 10"), {}) is None


def test_an_api_path_without_a_route_answers_json_and_a_page_path_html() -> None:
    api = not_found(RequestFactory().get("/v1/invoices/null"))
    assert (api.status_code, api["Content-Type"]) == (404, "application/json")
    assert orjson.loads(api.content) == {
        "code": "not_found",
        "message": "No such resource.",
        "details": {"path": "/v1/invoices/null"},
    }
    page = not_found(RequestFactory().get("/invoices/null"))
    assert (page.status_code, page["Content-Type"]) == (404, "text/html; charset=utf-8")


def test_the_hook_documents_the_error_answer_of_every_operation() -> None:
    schema = document_error_responses(SchemaGenerator().get_schema(request=None, public=True))
    operations = [op for path in schema["paths"].values() for op in path.values()]
    assert len(operations) > 40
    error = {"$ref": "#/components/schemas/Error"}
    assert all(
        op["responses"]["default"]["content"]["application/json"]["schema"] == error for op in operations
    )
    assert schema["components"]["schemas"]["Error"]["required"] == ["code", "message", "details"]
