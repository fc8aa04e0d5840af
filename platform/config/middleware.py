"""Under /v1/, every error answer is `{code, message, details}`, whoever made it.

DRF views answer their errors through `common.error_handler.api_exception_handler`, and unknown paths through
`handler404`. What neither sees gets its body here: Django's own answers (the bare 405 of
`require_POST`/`require_GET`, the debug 404 page, a CSRF refusal), so no view has to know about it.

The path and the query string of every /v1/ request are identifiers (codes, ids, dates, cursors): a
control character in them other than tab or newline answers 400 before any view runs.
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import orjson
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from common.errors import error_response
from common.fields import CONTROL_MESSAGE
from treemeter_records.limits import has_forbidden_control

API_PREFIX = "/v1/"

# The code of an error answer that came without one, by status (others: the status phrase in snake case).
STATUS_CODES = {
    400: "bad_request",
    401: "not_authenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "request_too_large",
    415: "unsupported_media_type",
    429: "throttled",
    500: "server_error",
}
# Headers of the original answer that stay (the rest describe the body that is replaced).
KEPT_HEADERS = ("Allow", "WWW-Authenticate", "Retry-After", "Vary")


def is_api_path(path: str) -> bool:
    return path.startswith(API_PREFIX)


def _is_error_body(body: Any) -> bool:
    return (
        isinstance(body, dict)
        and isinstance(body.get("code"), str)
        and isinstance(body.get("message"), str)
        and isinstance(body.get("details"), dict)
    )


def has_error_shape(response: HttpResponseBase) -> bool:
    """Whether an answer's body is the standard `{code, message, details}` JSON object."""
    if response.streaming or not response.get("Content-Type", "").startswith("application/json"):
        return False
    try:
        body = orjson.loads(response.content)  # type: ignore[attr-defined]
    except orjson.JSONDecodeError:
        return False
    return _is_error_body(body)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def status_code_name(status: int) -> str:
    if status in STATUS_CODES:
        return STATUS_CODES[status]
    return _phrase(status).lower().replace(" ", "_").replace("-", "_")


def standard_error(request: HttpRequest, response: HttpResponseBase) -> HttpResponse:
    """The same status and meaningful headers, with the standard body: the answer's own when DRF
    rendered it otherwise (the browsable API's HTML for a browser), else one made from the status."""
    status = response.status_code
    data: Any = getattr(response, "data", None)
    if _is_error_body(data):
        answer = error_response(status, data["code"], data["message"], data["details"])
    else:
        answer = error_response(status, status_code_name(status), *_message_and_details(request, response))
    for name in KEPT_HEADERS:
        if name in response:
            answer[name] = response[name]
    return answer


def _message_and_details(request: HttpRequest, response: HttpResponseBase) -> tuple[str, dict[str, Any]]:
    if response.status_code == 405:
        allowed = [m.strip() for m in response.get("Allow", "").split(",") if m.strip()]
        return f"Method {request.method} is not allowed here.", {"allowed": allowed}
    if response.status_code == 404:
        return "No such resource.", {"path": request.path}
    return _phrase(response.status_code), {}


def control_problem(request: HttpRequest) -> dict[str, Any] | None:
    """Where a /v1/ request's path or query holds a forbidden control character, or None."""
    if has_forbidden_control(request.path):
        return {"path": [CONTROL_MESSAGE]}
    for name, values in request.GET.lists():
        if has_forbidden_control(name) or any(has_forbidden_control(v) for v in values):
            return {name: [CONTROL_MESSAGE]}
    return None


class ApiErrorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if not is_api_path(request.path):
            return self.get_response(request)
        problem = control_problem(request)
        if problem is not None:
            return error_response(400, "invalid_request", CONTROL_MESSAGE, problem)
        response = self.get_response(request)
        if response.status_code >= 400 and not has_error_shape(response):
            return standard_error(request, response)
        return response
