"""DRF's exception handler (settings REST_FRAMEWORK["EXCEPTION_HANDLER"]): every error a view raises,
answered in the standard shape of common.errors.

Apart from common.errors because it imports rest_framework.views, which loads DRF's settings, whose
classes (the parser, the pagination) import common.errors themselves.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from .errors import ApiError, RequestTooLarge, error_body

logger = logging.getLogger(__name__)


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
    if isinstance(exc, RequestDataTooBig):
        exc = RequestTooLarge(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    if isinstance(exc, ApiError):
        return Response(error_body(exc.code, exc.message, exc.details), status=exc.http_status)
    exc = _translated(exc)
    response = exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    if isinstance(exc, exceptions.ValidationError):
        response.data = error_body("invalid_request", "The request has invalid fields.", response.data)
        response.status_code = status.HTTP_400_BAD_REQUEST
        return response
    codes = exc.get_codes()
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    details: dict[str, Any] = {}
    wait = getattr(exc, "wait", None) if isinstance(exc, exceptions.Throttled) else None
    if wait is not None:
        details["retry_after_seconds"] = int(wait)
    response.data = error_body(codes if isinstance(codes, str) else exc.default_code, detail, details)
    return response
