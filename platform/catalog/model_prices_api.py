"""The LLM price catalogue over HTTP.

- ``GET /v1/catalog/model-prices``: the versions, filtered by ``currency``, ``model`` and ``as_of`` (a
  UTC day: only the version of each model in force then). Every signed-in user: list prices are public
  to customers.
- ``GET /v1/catalog/model-prices/export?currency=&as_of=``: the versions in force on that day (default:
  today) as LiteLLM's ``model_prices_and_context_window.json``.
- ``POST /v1/catalog/model-prices/import?currency=&effective_from=`` (staff): the body is such a file,
  as users keep it, read with exact decimals. 201 with what was stored; a retry of the same file answers
  200 with nothing stored twice; 400 ``invalid_model_prices`` names every malformed entry's model and
  field (nothing is stored); 409 ``price_version_exists`` for a model with other prices on that day.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.money import MINOR_UNITS
from common.pagination import CursorPage
from common.parsers import JsonFileParser
from pricing.errors import InvalidRequest

from .litellm import load_prices, render_prices
from .models import ModelPrice
from .selectors import listed_prices, model_prices
from .services import import_model_prices


class ModelPriceSerializer(serializers.ModelSerializer):
    class Meta:
        model = ModelPrice
        fields = [
            "model_id",
            "currency",
            "effective_from",
            "input_per_token",
            "output_per_token",
            "cache_read_per_token",
            "cache_write_per_token",
            "provider",
            "mode",
        ]


class ByModel(CursorPage):
    # DRF orders a cursor page by several fields; its stubs know only one.
    ordering = ("model_id", "currency", "effective_from")  # type: ignore[assignment]


def _day(request: Request, name: str) -> date | None:
    """The day given as `name`, or None when the parameter is absent (an empty one is refused)."""
    return _required_day(request, name) if name in request.query_params else None


def _required_day(request: Request, name: str) -> date:
    raw = request.query_params.get(name, "")
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise InvalidRequest(f"invalid_{name}", f"{name} must be a day, YYYY-MM-DD.", {}) from None


def _currency(request: Request, required: bool = False) -> str:
    currency = request.query_params.get("currency", "")
    if (currency or required) and currency not in MINOR_UNITS:
        raise InvalidRequest("invalid_currency", f"currency is one of {', '.join(sorted(MINOR_UNITS))}.", {})
    return currency


_FILTERS = [
    OpenApiParameter("currency", str, description="ISO 4217 code."),
    OpenApiParameter("model", str, description="A model id."),
    OpenApiParameter("as_of", OpenApiTypes.DATE, description="Only the versions in force on this UTC day."),
]


class ModelPriceListView(generics.ListAPIView):
    """The LLM price catalogue's versions (per token), by model, currency and day."""

    serializer_class = ModelPriceSerializer
    pagination_class = ByModel

    @extend_schema(parameters=_FILTERS)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[ModelPrice]:
        request = self.request
        return model_prices(_currency(request), request.query_params.get("model", ""), _day(request, "as_of"))


class ModelPriceExportView(APIView):
    """The versions in force on `as_of` (default: today, UTC) in one currency, as LiteLLM's file."""

    @extend_schema(
        parameters=[
            OpenApiParameter("currency", str, required=True, description="ISO 4217 code."),
            OpenApiParameter("as_of", OpenApiTypes.DATE, description="A UTC day; default today."),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> HttpResponse:
        currency = _currency(request, required=True)
        as_of = _day(request, "as_of") or timezone.now().date()
        response = HttpResponse(
            render_prices(listed_prices(currency, as_of)), content_type="application/json"
        )
        response["Content-Disposition"] = f'attachment; filename="model_prices_{currency}_{as_of}.json"'
        return response


class ImportResultSerializer(serializers.Serializer):
    created = serializers.ListField(child=serializers.CharField())
    unchanged = serializers.ListField(child=serializers.CharField())
    skipped = serializers.ListField(child=serializers.CharField())


class ModelPriceImportView(APIView):
    """Staff: import a LiteLLM `model_prices_and_context_window.json` as the versions of one currency
    from one UTC day (see the module docstring for the answers)."""

    permission_classes = [IsAdminUser]
    parser_classes = [JsonFileParser]

    @extend_schema(
        parameters=[
            OpenApiParameter("currency", str, required=True, description="ISO 4217 code."),
            OpenApiParameter("effective_from", OpenApiTypes.DATE, required=True, description="A UTC day."),
        ],
        request={"application/json": OpenApiTypes.OBJECT},
        responses={201: ImportResultSerializer, 200: ImportResultSerializer},
    )
    def post(self, request: Request) -> Response:
        currency = _currency(request, required=True)
        effective_from = _required_day(request, "effective_from")
        body = request.data.get(JsonFileParser.KEY, b"") if isinstance(request.data, dict) else b""
        result = import_model_prices(load_prices(body), currency, effective_from)
        body = {"created": result.created, "unchanged": result.unchanged, "skipped": result.skipped}
        return Response(body, status=status.HTTP_201_CREATED if result.created else status.HTTP_200_OK)
