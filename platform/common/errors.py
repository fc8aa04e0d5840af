"""One error shape for every API answer: {"code", "message", "details"} with stable codes."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response

from treemeter_records.limits import JSON_MAX_DEPTH, JSON_MAX_MEMBERS

logger = logging.getLogger(__name__)


class ApiError(Exception):
    """A domain error with a stable code. Raised in a DRF view, it becomes the standard error answer,
    so views need no try/except to translate their services' errors."""

    http_status = 400

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}


class MalformedJson(ApiError):
    """A body that is not JSON, or JSON over the nesting or member limit (common.parsers)."""

    http_status = 400

    def __init__(self, reason: str) -> None:
        super().__init__(
            "malformed_json",
            f"The body is not acceptable JSON: {reason}.",
            {"reason": reason, "max_depth": JSON_MAX_DEPTH, "max_members": JSON_MAX_MEMBERS},
        )


class RequestTooLarge(ApiError):
    """A body over a size limit: the JSON limit (common.parsers) or Django's DATA_UPLOAD_MAX_MEMORY_SIZE."""

    http_status = 413

    def __init__(self, limit: int) -> None:
        super().__init__(
            "request_too_large", f"A request body may hold at most {limit} bytes.", {"max_bytes": limit}
        )


def error_response(
    http_status: int, code: str, message: str, details: dict[str, Any] | None = None
) -> JsonResponse:
    return JsonResponse({"code": code, "message": message, "details": details or {}}, status=http_status)


def _body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    if details is None:
        details = {}
    elif not isinstance(details, dict):
        details = {"errors": details}
    return {"code": code, "message": message, "details": details}


def _translated(exc: Exception) -> Exception:
    """Django's own exceptions, and database refusals of a value, as the DRF exceptions they mean."""
    if isinstance(exc, Http404):
        return exceptions.NotFound()
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied()
    if isinstance(exc, DjangoValidationError):
        return exceptions.ValidationError(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)
    if isinstance(exc, DataError):
        # e.g. an id beyond bigint or a text longer than its column: the request's fault, not ours.
        logger.info("database refused a value: %s", exc)
        return exceptions.ValidationError({"errors": ["A value is out of range for its field."]})
    if isinstance(exc, ValueError) and "NUL (0x00)" in str(exc):
        # psycopg refuses a NUL character in a text parameter before PostgreSQL sees it.
        return exceptions.ValidationError({"errors": ["Text must not contain NUL characters."]})
    return exc


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, answering every error it knows in the standard shape; anything else stays a 500
    (DRF re-raises it, so it is logged with its traceback)."""
    # Imported here: rest_framework.views loads the DRF settings, whose classes import ApiError.
    from rest_framework.views import exception_handler

    if isinstance(exc, RequestDataTooBig):
        exc = RequestTooLarge(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    if isinstance(exc, ApiError):
        return Response(_body(exc.code, exc.message, exc.details), status=exc.http_status)
    exc = _translated(exc)
    response = exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    if isinstance(exc, exceptions.ValidationError):
        response.data = _body("invalid_request", "The request has invalid fields.", response.data)
        response.status_code = status.HTTP_400_BAD_REQUEST
        return response
    codes = exc.get_codes()
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    details: dict[str, Any] = {}
    wait = getattr(exc, "wait", None) if isinstance(exc, exceptions.Throttled) else None
    if wait is not None:
        details["retry_after_seconds"] = int(wait)
    response.data = _body(codes if isinstance(codes, str) else exc.default_code, detail, details)
    return response


ERROR_SCHEMA = {
    "type": "object",
    "description": "Every error answer: a stable machine-readable code, a message, and details.",
    "properties": {
        "code": {"type": "string", "example": "invalid_request"},
        "message": {"type": "string"},
        "details": {"type": "object", "additionalProperties": True},
    },
    "required": ["code", "message", "details"],
}


def document_error_responses(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: every operation may answer an Error (4xx, and 503 for a
    missing dependency) as its `default` response, so clients and schemathesis know the error shape."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    for methods in result.get("paths", {}).values():
        for operation in methods.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            operation["responses"].setdefault(
                "default",
                {
                    "description": "An error: {code, message, details}.",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                },
            )
    return result


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler404: an API path that matches no route answers the standard JSON error, pages Django's."""
    if request.path.startswith("/v1/"):
        return error_response(404, "not_found", "No such resource.", {"path": request.path})
    return defaults.page_not_found(request, exception or Http404())


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler400 (Django's refusals before a view runs, e.g. a body over DATA_UPLOAD_MAX_MEMORY_SIZE):
    API clients get the standard JSON error (413 for a body too large), pages Django's."""
    if not request.path.startswith("/v1/"):
        return defaults.bad_request(request, exception or Exception())
    if isinstance(exception, RequestDataTooBig):
        too_large = RequestTooLarge(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        return error_response(too_large.http_status, too_large.code, too_large.message, too_large.details)
    return error_response(400, "bad_request", "The request could not be read.")


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: API clients get the standard JSON error (the traceback is logged), pages Django's."""
    if request.path.startswith("/v1/"):
        return error_response(500, "server_error", "An internal error occurred; it has been logged.")
    return defaults.server_error(request)
