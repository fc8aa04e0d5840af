"""The catalogue: packages with their purchasable plans (buying one: billing.purchases_api)."""

from __future__ import annotations

from django.db.models import QuerySet
from rest_framework import generics, serializers

from accounts.access import principal_of
from common.pagination import CursorPage

from .models import ComputePackage, PackagePlan, PlanPrice
from .selectors import active_packages


class PlanPriceSerializer(serializers.ModelSerializer):
    class Meta:
        model = PlanPrice
        fields = ["dimension", "charge_model", "unit_price", "properties", "included_quantity"]


class PlanSerializer(serializers.ModelSerializer):
    prices = PlanPriceSerializer(many=True)

    class Meta:
        model = PackagePlan
        fields = ["code", "name", "currency", "period", "base_fee", "payment", "prices"]


class PackageSerializer(serializers.ModelSerializer):
    plans = PlanSerializer(many=True, help_text="The active plans one can buy.")

    class Meta:
        model = ComputePackage
        fields = ["code", "name", "unit", "description", "plans"]


class ByCode(CursorPage):
    ordering = "code"


class PackageListView(generics.ListAPIView):
    """Active compute packages with their purchasable plans and price templates."""

    serializer_class = PackageSerializer
    pagination_class = ByCode

    def get_queryset(self) -> QuerySet[ComputePackage]:
        return active_packages(principal_of(self.request))


class PackageDetailView(generics.RetrieveAPIView):
    serializer_class = PackageSerializer
    lookup_field = "code"

    def get_queryset(self) -> QuerySet[ComputePackage]:
        return active_packages(principal_of(self.request))
