"""One error shape for every API answer: {"code", "message", "details"} with stable codes."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

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


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    if details is None:
        details = {}
    elif not isinstance(details, dict):
        details = {"errors": details}
    return {"code": code, "message": message, "details": details}


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
