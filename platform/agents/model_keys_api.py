"""Model publisher keys and the manifest refusals agents report.

- ``POST /v1/models/publisher-keys`` (staff): register a publisher's key for a model id;
  ``GET`` lists them. Agents get the keys in force in their entitlement snapshot.
- ``POST /v1/agents/manifest-refusals`` (an agent's signed request, protocol.MANIFEST_REFUSALS_PATH):
  the agent refused a checkpoint's manifest and says so before it exits.
- ``GET /v1/models/manifest-refusals`` (staff): those refusals, newest first.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import JsonResponse
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.permissions import AllowAny, IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response

from common.fields import IdentifierField
from treemeter_records.protocol import MANIFEST_REFUSAL_REASONS
from treemeter_records.timeutil import from_unix_nanos

from .models import ManifestRefusal, ModelPublisherKey
from .selectors import manifest_refusals
from .services import record_manifest_refusal, register_model_key
from .signed_requests import SIGNATURE_HEADERS, signed_agent_key

MODEL_ID = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$"


class ModelPublisherKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = ModelPublisherKey
        fields = ["model_id", "key_id", "public_key", "created_at", "revoked_at"]


class ModelPublisherKeyRegistrationSerializer(serializers.Serializer):
    model_id = serializers.RegexField(MODEL_ID, help_text="The manifest's model_id.")
    public_key = IdentifierField(max_length=64, help_text="Base64 of the raw 32-byte Ed25519 public key.")


class ModelPublisherKeyListView(generics.ListAPIView):
    """Staff: the model publisher keys, revoked ones too. POST registers one (idempotent: the same key for
    the same model answers 200 with the stored key; a new one 201); 400 ``invalid_public_key``."""

    permission_classes = [IsAdminUser]
    serializer_class = ModelPublisherKeySerializer
    queryset = ModelPublisherKey.objects.all()

    @extend_schema(
        request=ModelPublisherKeyRegistrationSerializer, responses={201: ModelPublisherKeySerializer}
    )
    def post(self, request: Request) -> Response:
        serializer = ModelPublisherKeyRegistrationSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        key, created = register_model_key(
            model_id=serializer.validated_data["model_id"],
            public_key_b64=serializer.validated_data["public_key"],
        )
        return Response(
            ModelPublisherKeySerializer(key).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class ManifestRefusalSerializer(serializers.ModelSerializer):
    agent_id = serializers.CharField(source="agent.agent_id")

    class Meta:
        model = ManifestRefusal
        fields = ["agent_id", "model_id", "reason", "key_id", "manifest_sha3", "refused_at", "received_at"]


class ManifestRefusalReportSerializer(serializers.Serializer):
    model_id = serializers.RegexField(MODEL_ID)
    reason = serializers.ChoiceField(choices=MANIFEST_REFUSAL_REASONS)
    key_id = serializers.RegexField(r"^(ed25519:[0-9a-f]{16})?$", allow_blank=True)
    manifest_sha3 = serializers.RegexField(r"^[0-9a-f]{64}$")
    refused_ns = serializers.IntegerField(min_value=0, max_value=2**63 - 1)


class ManifestRefusalListView(generics.ListAPIView):
    """Staff: the checkpoint manifests agents refused to load, newest first."""

    permission_classes = [IsAdminUser]
    serializer_class = ManifestRefusalSerializer

    def get_queryset(self) -> QuerySet[ManifestRefusal]:
        return manifest_refusals()


class ManifestRefusalReportView(generics.GenericAPIView):
    """An agent refused a checkpoint manifest (signed like every agent request): stored and counted in
    ``treemeter_manifest_refusals_total``. 401 ``bad_request_signature``/``stale_request`` unless an
    active agent key signed it; 400 naming the bad field.

    A retry is safe: the same report again (agent, manifest bytes' SHA3-256, time) answers 200 and
    stores and counts nothing more; a new one answers 201."""

    authentication_classes: list[Any] = []  # the request's signature is the authentication
    permission_classes = [AllowAny]
    throttle_classes: list[Any] = []
    serializer_class = ManifestRefusalReportSerializer

    @extend_schema(
        operation_id="agents_manifest_refusals_create",
        responses={201: ManifestRefusalSerializer},
        parameters=SIGNATURE_HEADERS,
        auth=[],
    )
    def post(self, request: Request) -> Response | JsonResponse:
        agent_key = signed_agent_key(request._request)
        if isinstance(agent_key, JsonResponse):
            return agent_key
        serializer = ManifestRefusalReportSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        refusal, created = record_manifest_refusal(
            agent=agent_key.agent,
            model_id=data["model_id"],
            reason=data["reason"],
            key_id=data["key_id"],
            manifest_sha3=data["manifest_sha3"],
            refused_at=from_unix_nanos(data["refused_ns"]),
        )
        return Response(
            ManifestRefusalSerializer(refusal).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )
