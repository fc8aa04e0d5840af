"""POST /v1/ingest/batches — the batch signature is the authentication, so no session or CSRF applies.
Every answer is counted and timed (ingest.measure → metrics.instruments)."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from common.errors import error_body

from .measure import count_answer
from .services import IngestRefused, ingest_batch

BATCH_CONTENT_TYPES = {"application/x-ndjson", "application/jsonl", "application/json"}


@csrf_exempt
@require_POST
def ingest_batches(request: HttpRequest) -> JsonResponse:
    began = time.perf_counter()
    status, body, replayed = _answer(request)
    count_answer(status, body, time.perf_counter() - began, replayed=replayed)
    return JsonResponse(body, status=status)


def _answer(request: HttpRequest) -> tuple[int, dict[str, Any], bool]:
    """(HTTP status, JSON body, whether it is a replayed batch's first answer)."""
    if request.content_type not in BATCH_CONTENT_TYPES:
        return 415, error_body("unsupported_media_type", "Send the batch as application/x-ndjson."), False
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 400, error_body("malformed_batch", "Content-Length is not a number."), False
    if declared > settings.INGEST_MAX_BATCH_BYTES:
        message = f"A batch may hold at most {settings.INGEST_MAX_BATCH_BYTES} bytes."
        return 413, error_body("batch_too_large", message), False
    try:
        answer = ingest_batch(request.body)
    except IngestRefused as refused:
        return refused.status, error_body(refused.code, refused.message, refused.details), False
    return answer.status, answer.body, answer.replayed
