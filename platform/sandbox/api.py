"""`/v1/sandbox`: the tenant's sandbox — open it on a combination of packages, its figures, its keys,
its daily simulated traffic, its projected invoice (a preview), and its reset."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import WRITE_ANY, WRITE_DEVELOPER, principal_of
from entitlements.api import ApiKeySerializer, IssuedApiKeySerializer

from .models import MAX_DAILY_EVENTS, Sandbox
from .selectors import SandboxMetrics, projected_invoice, sandbox_metrics, sandbox_of
from .services import (
    MAX_PACKAGES,
    issue_sandbox_key,
    open_sandbox,
    reset_sandbox,
    set_daily_events,
)

SLUG = r"^[a-z0-9][a-z0-9-]*$"


class DailySerializer(serializers.Serializer):
    day = serializers.DateField()
    records = serializers.IntegerField()


class MetricsSerializer(serializers.Serializer):
    month = serializers.CharField()
    records = serializers.IntegerField(help_text="Calls this month (monthly volume).")
    served = serializers.IntegerField()
    p50_ms = serializers.FloatField(help_text="Response time of the served calls, median.")
    p99_ms = serializers.FloatField()
    events = serializers.IntegerField(help_text="Business events this month.")
    accepted = serializers.IntegerField(help_text="Events whose required capabilities all passed acceptance.")
    acceptance_rate = serializers.DecimalField(max_digits=6, decimal_places=4, allow_null=True)
    daily = DailySerializer(many=True)


class SandboxSerializer(serializers.Serializer):
    contract = serializers.CharField(source="contract.code")
    currency = serializers.CharField(source="contract.currency")
    packages = serializers.SerializerMethodField()
    daily_events = serializers.IntegerField()
    events_sent = serializers.IntegerField()
    simulated_until = serializers.DateTimeField()
    reset_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()

    def get_packages(self, sandbox: Sandbox) -> list[str]:
        return [p.code for p in sandbox.contract.held_packages()]


class SandboxAnswerSerializer(SandboxSerializer):
    metrics = MetricsSerializer()


class OpenSerializer(serializers.Serializer):
    packages = serializers.ListField(
        child=serializers.RegexField(SLUG, max_length=64), min_length=1, max_length=MAX_PACKAGES
    )
    daily_events = serializers.IntegerField(min_value=0, max_value=MAX_DAILY_EVENTS, default=1000)


class TrafficSerializer(serializers.Serializer):
    daily_events = serializers.IntegerField(min_value=0, max_value=MAX_DAILY_EVENTS)


class KeyRequestSerializer(serializers.Serializer):
    package = serializers.RegexField(SLUG, max_length=64)
    name = serializers.CharField(max_length=100, required=False, allow_blank=True)


class TenantQuerySerializer(serializers.Serializer):
    tenant = serializers.CharField(required=False, help_text="Staff: the tenant whose sandbox.")


class ProjectionQuerySerializer(TenantQuerySerializer):
    packages = serializers.CharField(
        required=False, allow_blank=True, max_length=1000, help_text="Comma-separated; empty: all."
    )


class LineSerializer(serializers.Serializer):
    kind = serializers.CharField()
    dimension = serializers.CharField()
    description = serializers.CharField()
    quantity = serializers.DecimalField(max_digits=30, decimal_places=6)
    unit_price = serializers.DecimalField(max_digits=30, decimal_places=8)
    amount = serializers.DecimalField(max_digits=30, decimal_places=2)


class ProjectionSerializer(serializers.Serializer):
    month = serializers.CharField()
    packages = serializers.ListField(child=serializers.CharField())
    currency = serializers.CharField()
    measured_until = serializers.DateTimeField()
    factor = serializers.DecimalField(max_digits=20, decimal_places=6, help_text="Month ÷ time measured.")
    lines = LineSerializer(many=True)
    subtotal = serializers.DecimalField(max_digits=30, decimal_places=2)
    tax = serializers.DecimalField(max_digits=30, decimal_places=2)
    total = serializers.DecimalField(max_digits=30, decimal_places=2)
    preview = serializers.BooleanField(help_text="Always true: never finalised, numbered or sent.")


def _sandbox(request: Request) -> Sandbox:
    """The caller's tenant's sandbox (staff: `?tenant=`)."""
    return sandbox_of(principal_of(request), request.query_params.get("tenant"))


def _answer(sandbox: Sandbox, metrics: SandboxMetrics) -> dict[str, Any]:
    data = dict(SandboxSerializer(sandbox).data)
    data["metrics"] = MetricsSerializer(
        {
            **metrics.__dict__,
            "acceptance_rate": metrics.acceptance_rate,
            "daily": [{"day": day, "records": n} for day, n in metrics.daily],
        }
    ).data
    return data


@extend_schema(parameters=[TenantQuerySerializer])
class SandboxView(APIView):
    """The tenant's sandbox and this month's figures (404 `sandbox_not_found` before it is opened).
    POST opens it (409 `sandbox_exists` the second time); PATCH changes its daily simulated events."""

    write_roles = WRITE_ANY

    @extend_schema(responses={200: SandboxAnswerSerializer})
    def get(self, request: Request) -> Response:
        sandbox = _sandbox(request)
        return Response(_answer(sandbox, sandbox_metrics(sandbox, timezone.now())))

    @extend_schema(request=OpenSerializer, responses={201: SandboxAnswerSerializer})
    def post(self, request: Request) -> Response:
        body = OpenSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        sandbox = open_sandbox(principal_of(request), **body.validated_data)
        answer = _answer(sandbox, sandbox_metrics(sandbox, timezone.now()))
        return Response(answer, status=status.HTTP_201_CREATED)

    @extend_schema(request=TrafficSerializer, responses={200: SandboxAnswerSerializer})
    def patch(self, request: Request) -> Response:
        body = TrafficSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        sandbox = set_daily_events(_sandbox(request), body.validated_data["daily_events"])
        return Response(_answer(sandbox, sandbox_metrics(sandbox, timezone.now())))


@extend_schema(parameters=[TenantQuerySerializer])
class SandboxKeysView(APIView):
    """A new API key of the sandbox for one of its packages (its records go to the sandbox)."""

    write_roles = WRITE_DEVELOPER

    @extend_schema(request=KeyRequestSerializer, responses={201: IssuedApiKeySerializer})
    def post(self, request: Request) -> Response:
        body = KeyRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        issued = issue_sandbox_key(_sandbox(request), data["package"], data.get("name", ""))
        answer = {**ApiKeySerializer(issued.api_key).data, "api_key": issued.secret}
        return Response(answer, status=status.HTTP_201_CREATED)


@extend_schema(parameters=[TenantQuerySerializer])
class SandboxResetView(APIView):
    """Delete the sandbox's records: its figures and projection start again from zero (again: no-op)."""

    write_roles = WRITE_ANY

    @extend_schema(request=None, responses={200: SandboxAnswerSerializer})
    def post(self, request: Request) -> Response:
        # Nothing to send; a body sent is parsed all the same, so one past the JSON limits or not an
        # object is refused before anything is deleted.
        if int(request.META.get("CONTENT_LENGTH") or 0):
            serializers.Serializer(data=request.data).is_valid(raise_exception=True)
        sandbox = reset_sandbox(_sandbox(request))
        return Response(_answer(sandbox, sandbox_metrics(sandbox, timezone.now())))


class SandboxProjectionView(APIView):
    """This month's projected invoice of a combination of the sandbox's packages: a preview."""

    @extend_schema(parameters=[ProjectionQuerySerializer], responses={200: ProjectionSerializer})
    def get(self, request: Request) -> Response:
        query = ProjectionQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        chosen = [p for p in query.validated_data.get("packages", "").split(",") if p]
        projection = projected_invoice(_sandbox(request), chosen, timezone.now())
        rated = projection.invoice
        body = {
            "month": projection.month,
            "packages": projection.packages,
            "currency": projection.currency,
            "measured_until": projection.measured_until,
            "factor": projection.factor,
            "lines": [line.__dict__ for line in rated.lines],
            "subtotal": rated.subtotal,
            "tax": rated.tax,
            "total": rated.total,
            "preview": True,
        }
        return Response(ProjectionSerializer(body).data)
