"""One error shape for every API answer: {"code", "message", "details"} with stable codes."""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler


class ApiError(Exception):
    """A domain error with a stable code. Raised in a DRF view, it becomes the standard error answer,
    so views need no try/except to translate their services' errors."""

    http_status = 400

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}


def error_response(
    http_status: int, code: str, message: str, details: dict[str, Any] | None = None
) -> JsonResponse:
    return JsonResponse({"code": code, "message": message, "details": details or {}}, status=http_status)


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApiError):
        return Response(
            {"code": exc.code, "message": exc.message, "details": exc.details}, status=exc.http_status
        )
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        body = {
            "code": "invalid_request",
            "message": "The request has invalid fields.",
            "details": response.data,
        }
        return Response(body, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, exceptions.APIException):
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        body = {
            "code": exc.get_codes() if isinstance(exc.get_codes(), str) else exc.default_code,
            "message": detail,
            "details": {},
        }
        response.data = body
    return response
