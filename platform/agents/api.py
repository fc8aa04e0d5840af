from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.fields import IdentifierField

from .services import register_agent


class AgentRegistrationSerializer(serializers.Serializer):
    agent_id = serializers.RegexField(r"^[a-z0-9][a-z0-9._-]{0,63}$")
    public_key = IdentifierField(max_length=64, help_text="Base64 of the raw 32-byte Ed25519 public key.")
    tenants = serializers.ListField(child=IdentifierField(max_length=64), default=list)
    contracts = serializers.ListField(child=IdentifierField(max_length=64), default=list)
    host_class = IdentifierField(max_length=64, default="", allow_blank=True)

    def validate(self, attrs: dict) -> dict:
        if not attrs["tenants"] and not attrs["contracts"]:
            raise serializers.ValidationError("Bind the agent to at least one tenant or contract.")
        return attrs


class AgentRegisteredSerializer(serializers.Serializer):
    agent_id = serializers.CharField()
    key_id = serializers.CharField(help_text="The key's id, as agents name it in batch headers.")


class AgentRegistrationView(APIView):
    """Platform staff register an agent key. Idempotent: the same agent and key again returns the same key."""

    permission_classes = [IsAdminUser]
    serializer_class = AgentRegistrationSerializer

    @extend_schema(request=AgentRegistrationSerializer, responses={201: AgentRegisteredSerializer})
    def post(self, request: Request) -> Response:
        serializer = AgentRegistrationSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        key = register_agent(
            agent_id=data["agent_id"],
            public_key_b64=data["public_key"],
            tenant_codes=data["tenants"],
            contract_codes=data["contracts"],
            host_class=data["host_class"],
        )
        answer = AgentRegisteredSerializer({"agent_id": data["agent_id"], "key_id": key.key_id}).data
        return Response(answer, status=status.HTTP_201_CREATED)
