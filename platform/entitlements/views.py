"""Entitlements: the signed snapshot for agents, the platform's public key, staff key management."""

from __future__ import annotations

import time

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.selectors import key_with_agent
from common.errors import error_response
from common.fields import IdentifierField
from treemeter_records import (
    key_id_for,
    private_key_from_seed,
    protocol,
    public_key_from_b64,
    public_key_to_b64,
)

from .selectors import entitlement_snapshot
from .services import issue_api_key, revoke_api_key

REQUEST_WINDOW_NS = 300 * 10**9


@require_GET
def snapshot(request: HttpRequest) -> JsonResponse:
    """The agent signs the request (see treemeter_records.protocol); the answer is signed by the platform."""
    agent_id = request.headers.get(protocol.HEADER_AGENT, "")
    key_id = request.headers.get(protocol.HEADER_KEY_ID, "")
    signature = request.headers.get(protocol.HEADER_SIGNATURE, "")
    try:
        timestamp = int(request.headers.get(protocol.HEADER_TIMESTAMP, ""))
    except ValueError:
        return error_response(400, "bad_request_signature", f"{protocol.HEADER_TIMESTAMP} must be Unix ns.")
    if abs(time.time_ns() - timestamp) > REQUEST_WINDOW_NS:
        return error_response(401, "stale_request", "The request timestamp is more than 300 s off.")
    agent_key = key_with_agent(key_id)
    if (
        agent_key is None
        or agent_key.revoked_at is not None
        or not agent_key.agent.active
        or agent_key.agent.agent_id != agent_id
        or not protocol.verify_request(
            public_key_from_b64(agent_key.public_key), signature, "GET", request.path, timestamp
        )
    ):
        return error_response(
            401, "bad_request_signature", "Unknown agent key or a signature that does not verify."
        )
    body = entitlement_snapshot(agent_key)
    platform_key = private_key_from_seed(settings.PLATFORM_SIGNING_KEY)
    return JsonResponse(
        {
            "snapshot": body,
            "signature": protocol.sign_snapshot(platform_key, body),
            "key_id": key_id_for(platform_key),
        }
    )


@require_GET
def platform_key(request: HttpRequest) -> JsonResponse:
    key = private_key_from_seed(settings.PLATFORM_SIGNING_KEY)
    return JsonResponse({"key_id": key_id_for(key), "public_key": public_key_to_b64(key)})


class ApiKeyIssueSerializer(serializers.Serializer):
    contract = IdentifierField(max_length=64)
    sla_class = IdentifierField(max_length=64, default="standard")
    quota_tokens = serializers.IntegerField(min_value=0, required=False, allow_null=True, default=None)
    name = IdentifierField(max_length=200, default="", allow_blank=True)


class ApiKeyIssuedSerializer(serializers.Serializer):
    api_key = serializers.CharField(help_text="The key in clear: shown in this answer only.")
    prefix = serializers.CharField()
    contract = serializers.CharField()


class ApiKeyRevokedSerializer(serializers.Serializer):
    prefix = serializers.CharField()
    revoked_at = serializers.DateTimeField()


class ApiKeyIssueView(APIView):
    """Platform staff issue a customer API key; the key is in this answer only."""

    permission_classes = [IsAdminUser]
    serializer_class = ApiKeyIssueSerializer

    @extend_schema(request=ApiKeyIssueSerializer, responses={201: ApiKeyIssuedSerializer})
    def post(self, request: Request) -> Response:
        serializer = ApiKeyIssueSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        issued = issue_api_key(
            contract_code=data["contract"],
            sla_class=data["sla_class"],
            quota_tokens=data["quota_tokens"],
            name=data["name"],
        )
        answer = {"api_key": issued.secret, "prefix": issued.api_key.prefix, "contract": data["contract"]}
        return Response(ApiKeyIssuedSerializer(answer).data, status=status.HTTP_201_CREATED)


class ApiKeyRevokeView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(request=None, responses={200: ApiKeyRevokedSerializer})
    def post(self, request: Request, prefix: str) -> Response:
        api_key = revoke_api_key(prefix)
        return Response(ApiKeyRevokedSerializer(api_key).data)
