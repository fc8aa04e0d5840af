"""Contracts: the tenant's list and detail with quotas and what is left this period, and the staff API
for contract terms (charges per dimension, custom metrics; bad terms answer 400 with
{code, message, details}; the same PUT again is a no-op). A charge PUT with `effective_from` adds a
price version from that instant (docs/billing.md, "Price changes within a contract")."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import JsonResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import generics, serializers
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import principal_of
from common.errors import error_response
from common.fields import IdentifierField
from common.filters import ListFilter, code_filter

from .models import Contract, ContractMetric
from .selectors import current_usage, quotas, visible_contracts
from .services import TERM_FIELDS, set_charge, set_metric, update_terms


class QuotaSerializer(serializers.Serializer):
    dimension = serializers.CharField()
    charge_model = serializers.CharField()
    unit_price = serializers.DecimalField(max_digits=20, decimal_places=8)
    included = serializers.DecimalField(max_digits=24, decimal_places=6, help_text="Free each period.")
    used = serializers.DecimalField(
        max_digits=24, decimal_places=6, allow_null=True, help_text="This month (UTC); null: not metered."
    )
    left = serializers.DecimalField(max_digits=24, decimal_places=6, allow_null=True)


class ContractSerializer(serializers.ModelSerializer):
    """A contract with its quotas; `context["usage"]` maps contract codes to this period's usage."""

    tenant = serializers.CharField(source="tenant.code")
    package = serializers.CharField(source="package.code")
    plan = serializers.CharField(source="plan.code", allow_null=True, default=None)
    quotas = serializers.SerializerMethodField()

    class Meta:
        model = Contract
        fields = [
            "code",
            "tenant",
            "package",
            "plan",
            "status",
            "currency",
            "period",
            "starts_at",
            "ends_at",
            "base_fee",
            "base_fee_timing",
            "minimum_commitment",
            "tax_rate",
            "quotas",
        ]

    @extend_schema_field(QuotaSerializer(many=True))
    def get_quotas(self, contract: Contract) -> list[dict[str, Any]]:
        usage = self.context.get("usage", {}).get(contract.code)
        return [QuotaSerializer(q).data for q in quotas(contract, usage)]


class ContractFilter(ListFilter):
    status = serializers.ChoiceField(choices=Contract.Status.choices, required=False)
    package = code_filter("A package code.")

    lookups = {"status": "status", "package": "package__code"}


@extend_schema_view(get=extend_schema(parameters=[ContractFilter]))
class ContractListView(generics.ListAPIView):
    """The caller's contracts (staff: all), each with its quotas and what is left this month."""

    serializer_class = ContractSerializer

    def get_queryset(self) -> QuerySet[Contract]:
        return ContractFilter.narrow(visible_contracts(principal_of(self.request).tenant_id), self.request)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset()) or []
        usage = current_usage(page, timezone.now())
        return self.get_paginated_response(ContractSerializer(page, many=True, context={"usage": usage}).data)


class ContractDetailView(generics.RetrieveAPIView):
    """One contract (another tenant's answers 404) with its quotas and what is left this month."""

    serializer_class = ContractSerializer
    lookup_field = "code"

    def get_queryset(self) -> QuerySet[Contract]:
        return visible_contracts(principal_of(self.request).tenant_id)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        contract = self.get_object()
        usage = current_usage([contract], timezone.now())
        return Response(ContractSerializer(contract, context={"usage": usage}).data)


def _contract(code: str) -> Contract | JsonResponse:
    contract = Contract.objects.filter(code=code).first()
    if contract is None:
        return error_response(404, "contract_not_found", f"No contract {code!r}.")
    return contract


class ChargeSerializer(serializers.Serializer):
    charge_model = IdentifierField(default="per_unit")
    unit_price = serializers.CharField(required=False)
    properties = serializers.DictField(required=False)
    included_quantity = serializers.CharField(default="0")
    currency = IdentifierField(required=False)
    effective_from = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="A new price version from this instant (UTC) on; absent or null: the initial price.",
    )


class MetricSerializer(serializers.Serializer):
    name = IdentifierField(max_length=200)
    expression = serializers.CharField()


class MetricPathSerializer(serializers.Serializer):
    """The metric's code, from the URL: within its column."""

    metric = IdentifierField(max_length=ContractMetric._meta.get_field("code").max_length)


class ChargeView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(request=ChargeSerializer, responses={200: ChargeSerializer})
    def put(self, request: Request, code: str, dimension: str) -> Any:
        body = ChargeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        contract = _contract(code)
        if isinstance(contract, JsonResponse):
            return contract
        data = dict(body.validated_data)
        price = set_charge(contract, dimension, data.pop("charge_model"), **data)
        return JsonResponse(
            {
                "dimension": price.dimension,
                "charge_model": price.charge_model,
                "unit_price": str(price.unit_price),
                "properties": price.properties,
                "included_quantity": str(price.included_quantity),
                "effective_from": price.effective_from.isoformat() if price.effective_from else None,
            }
        )


class MetricView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(request=MetricSerializer, responses={200: MetricSerializer})
    def put(self, request: Request, code: str, metric: str) -> Any:
        MetricPathSerializer(data={"metric": metric}).is_valid(raise_exception=True)
        body = MetricSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        contract = _contract(code)
        if isinstance(contract, JsonResponse):
            return contract
        row = set_metric(contract, metric, body.validated_data["name"], body.validated_data["expression"])
        return JsonResponse({"code": row.code, "name": row.name, "expression": row.expression})


class TermsView(APIView):
    """PATCH the contract's period terms: base fee and timing, commitment, tax, grace, late usage,
    credit order, outcome verification. Only the fields sent change; one bad field changes nothing."""

    permission_classes = [IsAdminUser]

    @extend_schema(request=OpenApiTypes.OBJECT, responses={200: OpenApiTypes.OBJECT})
    def patch(self, request: Request, code: str) -> Any:
        contract = _contract(code)
        if isinstance(contract, JsonResponse):
            return contract
        data = dict(request.data) if isinstance(request.data, dict) else {}
        currency = data.pop("currency", None)
        contract = update_terms(contract, data, currency)
        return JsonResponse({name: _plain(getattr(contract, name)) for name in TERM_FIELDS})


def _plain(value: Any) -> Any:
    return value if isinstance(value, bool | int | list | str) else str(value)
