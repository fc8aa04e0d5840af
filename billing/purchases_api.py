"""Package purchase: `POST /v1/purchases` makes the tenant's contract on a plan (billing.purchases)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import WRITE_BILLING, principal_of
from common.fields import IdentifierField

from .contracts_api import ContractSerializer
from .purchases import purchase_package


class PurchaseRequestSerializer(serializers.Serializer):
    package = IdentifierField(max_length=64)
    plan = IdentifierField(max_length=64)
    starts_at = serializers.DateTimeField(required=False, help_text="Default: now.")


class PurchaseSerializer(serializers.Serializer):
    contract = ContractSerializer()
    checkout_url = serializers.URLField(
        allow_null=True, help_text="Pay here (Stripe Checkout); null when the plan is invoiced."
    )


class PurchaseView(APIView):
    """Buy a package plan: the tenant's new contract, active at once (invoice plans) or once Stripe
    Checkout reports the payment (`checkout_url`). Send an Idempotency-Key to retry safely."""

    write_roles = WRITE_BILLING

    @extend_schema(request=PurchaseRequestSerializer, responses={201: PurchaseSerializer})
    def post(self, request: Request) -> Response:
        body = PurchaseRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        purchase = purchase_package(
            principal_of(request), data["package"], data["plan"], starts_at=data.get("starts_at")
        )
        answer = PurchaseSerializer(
            {"contract": purchase.contract, "checkout_url": purchase.checkout_url},
            context={"usage": {}},  # a new contract has used nothing yet
        )
        return Response(answer.data, status=status.HTTP_201_CREATED)
