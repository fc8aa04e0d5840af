"""Tenant-facing inference API keys: list, issue for one of the tenant's contracts (the key is in the
answer once), revoke. Agents learn of each change from their next entitlement snapshot."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import WRITE_DEVELOPER, principal_of
from common.fields import IdentifierField
from common.filters import ListFilter, code_filter

from .models import ApiKey
from .selectors import key_package, visible_api_keys
from .services import issue_tenant_api_key, revoke_api_key


class ApiKeySerializer(serializers.ModelSerializer):
    contract = serializers.CharField(source="contract.code")
    package = serializers.SerializerMethodField(
        help_text="The package of the contract its requests are under."
    )
    status = serializers.SerializerMethodField()

    class Meta:
        model = ApiKey
        fields = [
            "prefix",
            "name",
            "contract",
            "package",
            "sla_class",
            "quota_tokens",
            "status",
            "created_at",
            "revoked_at",
        ]

    def get_package(self, api_key: ApiKey) -> str:
        return key_package(api_key).code

    def get_status(self, api_key: ApiKey) -> str:
        return "revoked" if api_key.revoked_at is not None else "active"


class ApiKeyRequestSerializer(serializers.Serializer):
    contract = IdentifierField(max_length=64, help_text="One of your contracts.")
    sla_class = IdentifierField(max_length=64, default="standard")
    quota_tokens = serializers.IntegerField(
        min_value=0, required=False, allow_null=True, default=None, help_text="Tokens per month; null: none."
    )
    name = IdentifierField(max_length=200, default="", allow_blank=True)
    package = IdentifierField(
        max_length=64,
        default="",
        allow_blank=True,
        help_text="A package the contract holds, which the key's requests are made under; empty: the "
        "contract's own.",
    )


class IssuedApiKeySerializer(ApiKeySerializer):
    api_key = serializers.CharField(help_text="The key itself: shown only in this answer.")

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "api_key"]


class ApiKeyFilter(ListFilter):
    contract = code_filter("A contract code.")
    status = serializers.ChoiceField(choices=["active", "revoked"], required=False)

    lookups = {
        "contract": "contract__code",
        "status": lambda status: Q(revoked_at__isnull=status == "active"),
    }


@extend_schema_view(get=extend_schema(parameters=[ApiKeyFilter]))
class ApiKeyListView(generics.ListCreateAPIView):
    """The tenant's inference API keys (never the keys themselves); POST issues one."""

    serializer_class = ApiKeySerializer
    write_roles = WRITE_DEVELOPER

    def get_queryset(self) -> QuerySet[ApiKey]:
        return ApiKeyFilter.narrow(visible_api_keys(principal_of(self.request)), self.request)

    @extend_schema(request=ApiKeyRequestSerializer, responses={201: IssuedApiKeySerializer})
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = ApiKeyRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        issued = issue_tenant_api_key(
            principal_of(request),
            contract_code=data["contract"],
            sla_class=data["sla_class"],
            quota_tokens=data["quota_tokens"],
            name=data["name"],
            package_code=data["package"],
        )
        answer = {**ApiKeySerializer(issued.api_key).data, "api_key": issued.secret}
        return Response(answer, status=status.HTTP_201_CREATED)


class ApiKeyRevokeView(APIView):
    """Revoke one of the tenant's keys by its prefix (another tenant's answers 404)."""

    write_roles = WRITE_DEVELOPER

    @extend_schema(request=None, responses={200: ApiKeySerializer})
    def post(self, request: Request, prefix: str) -> Response:
        api_key = revoke_api_key(prefix, principal_of(request))
        return Response(ApiKeySerializer(api_key).data)
