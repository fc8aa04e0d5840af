"""Quota leases for agents: POST /v1/entitlements/leases and POST /v1/entitlements/leases/<id>/settle.

The agent signs each request as it signs the snapshot request (treemeter_records.protocol), the body's
SHA-256 included; the signature is the authentication, so no session or CSRF applies.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from rest_framework import serializers

from agents.signed_requests import signed_agent_key
from common.errors import ApiError, error_response
from common.fields import IdentifierField
from common.parsers import read_json

from .leases import LeaseAnswer, grant_lease, lease_state, settle_lease


class GrantSerializer(serializers.Serializer):
    key_hash = serializers.RegexField(r"^[0-9a-f]{64}$")
    period = IdentifierField(max_length=7)
    tokens = serializers.IntegerField(min_value=1, max_value=2**62)
    min_tokens = serializers.IntegerField(min_value=1, max_value=2**62)
    request_id = IdentifierField(min_length=8, max_length=64)


class SettleSerializer(serializers.Serializer):
    seq = serializers.IntegerField(min_value=1, max_value=2**62)
    spent_tokens = serializers.IntegerField(min_value=0, max_value=2**62)
    final = serializers.BooleanField()


def _validated(request: HttpRequest, serializer_class: type[serializers.Serializer]) -> dict[str, Any]:
    data = read_json(request)  # 400 malformed_json or 413 request_too_large, as every JSON body
    serializer = serializer_class(data=data if isinstance(data, dict) else {})
    if not serializer.is_valid():
        raise ApiError("invalid_lease_request", "The request has invalid fields.", serializer.errors)
    return dict(serializer.validated_data)


def _lease_body(answer: LeaseAnswer, now: datetime) -> dict[str, Any]:
    lease = answer.lease
    return {
        "lease": str(lease.id),
        "period": answer.quota_period.period,
        "state": lease_state(lease, now),
        "granted_tokens": lease.granted_tokens,
        "spent_tokens": lease.spent_tokens,
        "charged_tokens": lease.charged_tokens,
        "report_seq": lease.report_seq,
        "expires_at": lease.expires_at.isoformat(),
        "expires_in_s": max(0.0, (lease.expires_at - now).total_seconds()),
        "quota_tokens": answer.quota_tokens,
        "remaining_tokens": answer.remaining_tokens,
        "applied": answer.applied,
    }


@csrf_exempt
@require_POST
def grant(request: HttpRequest) -> JsonResponse:
    agent_key = signed_agent_key(request)
    if isinstance(agent_key, JsonResponse):
        return agent_key
    try:
        answer = grant_lease(agent_key, **_validated(request, GrantSerializer))
    except ApiError as error:
        return error_response(getattr(error, "http_status", 400), error.code, error.message, error.details)
    return JsonResponse(_lease_body(answer, timezone.now()), status=201 if answer.created else 200)


@csrf_exempt
@require_POST
def settle(request: HttpRequest, lease_id: uuid.UUID) -> JsonResponse:
    agent_key = signed_agent_key(request)
    if isinstance(agent_key, JsonResponse):
        return agent_key
    try:
        answer = settle_lease(agent_key, lease_id, **_validated(request, SettleSerializer))
    except ApiError as error:
        return error_response(getattr(error, "http_status", 400), error.code, error.message, error.details)
    return JsonResponse(_lease_body(answer, timezone.now()))
