"""Staff API for contract terms: charges per dimension and custom metrics. Bad terms answer 400 with
{code, message, details}; the same PUT again is a no-op."""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.views import APIView

from config.errors import error_response

from .models import Contract
from .services import TERM_FIELDS, set_charge, set_metric, update_terms


def _contract(code: str) -> Contract | JsonResponse:
    contract = Contract.objects.filter(code=code).first()
    if contract is None:
        return error_response(404, "contract_not_found", f"No contract {code!r}.")
    return contract


class ChargeSerializer(serializers.Serializer):
    charge_model = serializers.CharField(default="per_unit")
    unit_price = serializers.CharField(required=False)
    properties = serializers.DictField(required=False)
    included_quantity = serializers.CharField(default="0")
    currency = serializers.CharField(required=False)


class MetricSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    expression = serializers.CharField()


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
            }
        )


class MetricView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(request=MetricSerializer, responses={200: MetricSerializer})
    def put(self, request: Request, code: str, metric: str) -> Any:
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
