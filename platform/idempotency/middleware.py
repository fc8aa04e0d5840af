"""Honours `Idempotency-Key` on every POST under /v1/ (see `idempotency.services`)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from common.errors import error_response

from . import services

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255


def _scope(request: HttpRequest) -> str:
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    credential = request.headers.get("Authorization", "")
    if credential:
        return "auth:" + hashlib.sha256(credential.encode()).hexdigest()[:40]
    return "anon"


class IdempotencyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        key = request.headers.get(HEADER)
        if request.method != "POST" or key is None or not request.path.startswith("/v1/"):
            return self.get_response(request)
        if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
            return error_response(
                400,
                "invalid_idempotency_key",
                f"{HEADER} must be 1 to {MAX_KEY_LENGTH} printable characters.",
            )
        claim = services.claim_key(
            _scope(request), key, services.fingerprint(request.method, request.path, request.body)
        )
        if claim.outcome == "mismatch":
            return error_response(
                422,
                "idempotency_key_reused",
                f"This {HEADER} was used with a different request; use a new key for a new request.",
                {"key": key},
            )
        if claim.outcome == "in_progress":
            return error_response(
                409, "idempotency_in_progress", f"A request with this {HEADER} is still being processed."
            )
        if claim.outcome == "replay":
            replay = HttpResponse(
                bytes(claim.row.body), status=claim.row.status_code, content_type=claim.row.content_type
            )
            replay["Idempotent-Replayed"] = "true"
            return replay
        try:
            response = self.get_response(request)
        except BaseException:
            services.release(claim.row)
            raise
        if response.streaming:
            services.release(claim.row)
        else:
            services.record_answer(
                claim.row, response.status_code, response.get("Content-Type", ""), response.content
            )
        return response
