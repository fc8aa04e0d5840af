"""API tokens for programs: owners list, make (the secret is in the answer once) and revoke them."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.fields import IdentifierField

from .access import WRITE_OWNER, principal_of
from .models import ApiToken, Role
from .permissions import TenantRolePermission
from .services import issue_api_token, revoke_api_token


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Documents `Authorization: Bearer tmt_…` in the OpenAPI schema."""

    target_class = "accounts.authentication.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "tmt_…"}


class OwnersOnly(BasePermission):
    """Tokens are credentials: only the tenant's owners (and staff) may even list them."""

    message = "Only the tenant's owners manage API tokens."
    code = "forbidden_role"

    def has_permission(self, request: Request, view: Any) -> bool:
        return principal_of(request).may_write(WRITE_OWNER)


class ApiTokenSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.code", read_only=True)

    class Meta:
        model = ApiToken
        fields = ["prefix", "name", "role", "tenant", "created_at", "last_used_at", "revoked_at"]
        read_only_fields = fields


class ApiTokenRequestSerializer(serializers.Serializer):
    name = IdentifierField(max_length=200, required=False, default="", allow_blank=True)
    role = serializers.ChoiceField(choices=Role.choices)


class IssuedApiTokenSerializer(ApiTokenSerializer):
    secret = serializers.CharField(help_text="Send as `Authorization: Bearer <secret>`; shown only here.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class ApiTokenListView(generics.ListCreateAPIView):
    """The tenant's API tokens (secrets are never listed); POST makes one for a role."""

    permission_classes = [IsAuthenticated, TenantRolePermission, OwnersOnly]
    write_roles = WRITE_OWNER
    serializer_class = ApiTokenSerializer

    def get_queryset(self) -> QuerySet[ApiToken]:
        tokens = ApiToken.objects.select_related("tenant")
        tenant_id = principal_of(self.request).tenant_id
        return tokens if tenant_id is None else tokens.filter(tenant_id=tenant_id)

    @extend_schema(request=ApiTokenRequestSerializer, responses={201: IssuedApiTokenSerializer})
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = ApiTokenRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        issued = issue_api_token(principal_of(request), **body.validated_data)
        answer = {**ApiTokenSerializer(issued.token).data, "secret": issued.secret}
        return Response(answer, status=status.HTTP_201_CREATED)


class ApiTokenRevokeView(APIView):
    """Revoke a token by its prefix: it answers 401 from then on. Revoking twice is harmless."""

    permission_classes = [IsAuthenticated, TenantRolePermission, OwnersOnly]
    write_roles = WRITE_OWNER

    @extend_schema(request=None, responses={200: ApiTokenSerializer})
    def post(self, request: Request, prefix: str) -> Response:
        return Response(ApiTokenSerializer(revoke_api_token(principal_of(request), prefix)).data)
