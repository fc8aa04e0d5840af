"""Webhook endpoints of the caller's tenant, their delivery logs (every attempt), and replay."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import generics, serializers, status
from rest_framework.generics import get_object_or_404
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import WRITE_DEVELOPER, principal_of
from common.fields import IdentifierField, StrictBooleanField
from common.filters import ListFilter

from .models import WebhookDelivery, WebhookDeliveryAttempt, WebhookEndpoint
from .selectors import visible_deliveries, visible_endpoints
from .services import create_endpoint, replay_delivery, update_endpoint


class EndpointSerializer(serializers.ModelSerializer):
    event_types = serializers.ListField(
        child=IdentifierField(max_length=100),
        required=False,
        default=list,
        help_text='Event type patterns, e.g. ["invoice.*", "quota.exhausted"]; empty: every type.',
    )
    active = StrictBooleanField(required=False, default=True)

    class Meta:
        model = WebhookEndpoint
        fields = ["id", "url", "event_types", "active", "created_at"]
        read_only_fields = ["id", "created_at"]


class CreatedEndpointSerializer(EndpointSerializer):
    secret = serializers.CharField(read_only=True, help_text="Verify signatures with it; shown only here.")

    class Meta(EndpointSerializer.Meta):
        fields = [*EndpointSerializer.Meta.fields, "secret"]


class EndpointListView(generics.ListAPIView):
    """The tenant's webhook endpoints; POST adds one (its signing secret is in that answer only)."""

    serializer_class = EndpointSerializer
    write_roles = WRITE_DEVELOPER

    def get_queryset(self) -> QuerySet[WebhookEndpoint]:
        return visible_endpoints(principal_of(self.request))

    @extend_schema(request=EndpointSerializer, responses={201: CreatedEndpointSerializer})
    def post(self, request: Request) -> Response:
        body = EndpointSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        endpoint = create_endpoint(
            principal_of(request),
            url=body.validated_data["url"],
            event_types=body.validated_data["event_types"],
        )
        return Response(CreatedEndpointSerializer(endpoint).data, status=status.HTTP_201_CREATED)


@extend_schema_view(patch=extend_schema(request=EndpointSerializer, responses={200: EndpointSerializer}))
class EndpointDetailView(generics.RetrieveDestroyAPIView):
    """One endpoint (another tenant's answers 404); PATCH its url, event_types or active; DELETE it."""

    serializer_class = EndpointSerializer
    write_roles = WRITE_DEVELOPER

    def get_queryset(self) -> QuerySet[WebhookEndpoint]:
        return visible_endpoints(principal_of(self.request))

    def patch(self, request: Request, pk: int) -> Response:
        endpoint = self.get_object()
        body = EndpointSerializer(endpoint, data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        changes = {k: v for k, v in body.validated_data.items() if k in request.data}
        return Response(EndpointSerializer(update_endpoint(endpoint, changes)).data)


class AttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookDeliveryAttempt
        fields = [
            "number",
            "attempted_at",
            "status_code",
            "response_snippet",
            "error",
            "duration_ms",
            "next_retry_at",
        ]


class DeliverySerializer(serializers.ModelSerializer):
    event_id = serializers.CharField(source="event.event_id")
    event_type = serializers.CharField(source="event.type")
    endpoint = serializers.IntegerField(source="endpoint_id")
    attempts = AttemptSerializer(many=True)

    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "event_id",
            "event_type",
            "endpoint",
            "status",
            "next_retry_at",
            "created_at",
            "attempts",
        ]


class DeliveryFilter(ListFilter):
    status = serializers.ChoiceField(choices=WebhookDelivery.Status.choices, required=False)

    lookups = {"status": "status"}


@extend_schema_view(get=extend_schema(parameters=[DeliveryFilter]))
class EndpointDeliveryListView(generics.ListAPIView):
    """An endpoint's deliveries, newest first, each with every attempt as the receiver answered it."""

    serializer_class = DeliverySerializer

    def get_queryset(self) -> QuerySet[WebhookDelivery]:
        principal = principal_of(self.request)
        endpoint = get_object_or_404(visible_endpoints(principal), pk=self.kwargs["pk"])
        return DeliveryFilter.narrow(visible_deliveries(principal).filter(endpoint=endpoint), self.request)


class DeliveryReplayView(APIView):
    """Send a delivery again now (one more logged attempt, and retries if it fails with 5xx)."""

    write_roles = WRITE_DEVELOPER

    @extend_schema(request=None, responses={202: DeliverySerializer})
    def post(self, request: Request, pk: int) -> Response:
        deliveries = visible_deliveries(principal_of(request))
        replay_delivery(get_object_or_404(deliveries, pk=pk))
        return Response(DeliverySerializer(deliveries.get(pk=pk)).data, status=status.HTTP_202_ACCEPTED)
