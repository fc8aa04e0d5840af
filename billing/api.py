from __future__ import annotations

from rest_framework import generics, serializers
from rest_framework.permissions import IsAdminUser

from .models import Invoice, InvoiceLine


class InvoiceLineSerializer(serializers.ModelSerializer):
    class Meta:
        model = InvoiceLine
        fields = ["dimension", "description", "quantity", "unit_price", "amount"]


class InvoiceSerializer(serializers.ModelSerializer):
    contract = serializers.CharField(source="contract.code")
    tenant = serializers.CharField(source="tenant.code")
    lines = InvoiceLineSerializer(many=True)

    class Meta:
        model = Invoice
        fields = [
            "id",
            "contract",
            "tenant",
            "period_start",
            "period_end",
            "currency",
            "status",
            "record_count",
            "total",
            "lines",
        ]


class InvoiceDetailView(generics.RetrieveAPIView):
    """Platform staff read an invoice. (Tenant-scoped access comes with the portal's API tokens.)"""

    permission_classes = [IsAdminUser]
    serializer_class = InvoiceSerializer
    queryset = Invoice.objects.select_related("contract", "tenant").prefetch_related("lines")
