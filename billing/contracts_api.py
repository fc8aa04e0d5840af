"""Contracts as the tenant sees them: the list and detail with quotas and what is left this period
(billing.quotas measures the usage). The staff API for their terms is contracts.api."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.access import principal_of
from contracts.api import ContractFilter
from contracts.models import Contract
from contracts.selectors import visible_contracts

from .quotas import current_usage, quotas


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
            "price_by_catalogue",
            "catalogue_adjustment",
            "quotas",
        ]

    @extend_schema_field(QuotaSerializer(many=True))
    def get_quotas(self, contract: Contract) -> list[dict[str, Any]]:
        usage = self.context.get("usage", {}).get(contract.code)
        return [QuotaSerializer(q).data for q in quotas(contract, usage)]


@extend_schema_view(get=extend_schema(parameters=[ContractFilter]))
class ContractListView(generics.ListAPIView):
    """The caller's contracts (staff: all), each with its quotas and what is left this month."""

    serializer_class = ContractSerializer

    def get_queryset(self) -> QuerySet[Contract]:
        return ContractFilter.narrow(visible_contracts(principal_of(self.request)), self.request)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset()) or []
        usage = current_usage(page, timezone.now())
        return self.get_paginated_response(ContractSerializer(page, many=True, context={"usage": usage}).data)


class ContractDetailView(generics.RetrieveAPIView):
    """One contract (another tenant's answers 404) with its quotas and what is left this month."""

    serializer_class = ContractSerializer
    lookup_field = "code"

    def get_queryset(self) -> QuerySet[Contract]:
        return visible_contracts(principal_of(self.request))

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        contract = self.get_object()
        usage = current_usage([contract], timezone.now())
        return Response(ContractSerializer(contract, context={"usage": usage}).data)
