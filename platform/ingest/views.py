"""POST /v1/ingest/batches — the batch signature is the authentication, so no session or CSRF applies."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from common.errors import error_response

from .services import IngestRefused, ingest_batch

BATCH_CONTENT_TYPES = {"application/x-ndjson", "application/jsonl", "application/json"}


@csrf_exempt
@require_POST
def ingest_batches(request: HttpRequest) -> JsonResponse:
    if request.content_type not in BATCH_CONTENT_TYPES:
        return error_response(415, "unsupported_media_type", "Send the batch as application/x-ndjson.")
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return error_response(400, "malformed_batch", "Content-Length is not a number.")
    if declared > settings.INGEST_MAX_BATCH_BYTES:
        return error_response(
            413, "batch_too_large", f"A batch may hold at most {settings.INGEST_MAX_BATCH_BYTES} bytes."
        )
    try:
        answer = ingest_batch(request.body)
    except IngestRefused as refused:
        return error_response(refused.status, refused.code, refused.message, refused.details)
    return JsonResponse(answer.body, status=answer.status)
