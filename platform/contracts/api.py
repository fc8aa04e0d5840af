"""Contracts: the staff API for contract terms (charges per dimension, custom metrics; bad terms
answer 400 with {code, message, details}; the same PUT again is a no-op). A charge PUT with
`effective_from` adds a price version from that instant (docs/billing.md, "Price changes within a
contract"). The tenant's list and detail with quotas and what is left this period measure usage:
billing.contracts_api."""

from __future__ import annotations

from typing import Any, cast

from django.http import JsonResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.views import APIView

from common.errors import error_response
from common.fields import IdentifierField
from common.filters import ListFilter, code_filter
from pricing.expressions import AGGREGATIONS, metric_aggregation

from .models import Contract, ContractMetric
from .services import TERM_FIELDS, set_charge, set_metric, set_taxes, update_terms


class ContractFilter(ListFilter):
    status = serializers.ChoiceField(choices=Contract.Status.choices, required=False)
    package = code_filter("A package code.")

    lookups = {"status": "status", "package": "package__code"}


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
    expression = serializers.CharField(
        help_text="Over record fields (docs/billing.md); may be wrapped in one aggregation: "
        "period_max(…), unique_count(…), latest(…), time_weighted_sum(…) or sum(…) (the default)."
    )
    aggregation = serializers.ChoiceField(
        choices=AGGREGATIONS, read_only=True, help_text="How the period aggregates it, from the expression."
    )


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
        return JsonResponse(
            {
                "code": row.code,
                "name": row.name,
                "expression": row.expression,
                "aggregation": metric_aggregation(row.expression),
            }
        )


class TaxSerializer(serializers.Serializer):
    code = IdentifierField(max_length=32)
    name = IdentifierField(max_length=100)
    rate = serializers.DecimalField(max_digits=6, decimal_places=4, help_text="0.06 is 6 %.")
    applies_to = serializers.ListField(
        child=IdentifierField(max_length=32),
        required=False,
        help_text="Line kinds or dimensions; empty: all.",
    )


class TaxesView(APIView):
    """PUT the contract's taxes (a list, replacing the last; [] goes back to its single tax_rate)."""

    permission_classes = [IsAdminUser]

    @extend_schema(request=TaxSerializer(many=True), responses={200: TaxSerializer(many=True)})
    def put(self, request: Request, code: str) -> Any:
        body = TaxSerializer(data=request.data, many=True)
        body.is_valid(raise_exception=True)
        contract = _contract(code)
        if isinstance(contract, JsonResponse):
            return contract
        # The body as sent (its limits checked above): set_taxes refuses a key it does not know.
        taxes = set_taxes(contract, cast(list[dict[str, Any]], request.data))
        answer = [
            {"code": t.code, "name": t.name, "rate": str(t.rate), "applies_to": t.applies_to} for t in taxes
        ]
        return JsonResponse(answer, safe=False)


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
