"""/v1/sla/…: stored SLA reports and service credits, only ever the caller's own tenant's."""

from __future__ import annotations

from django.core.exceptions import ValidationError as ModelValidationError
from django.db.models import Q
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import generics, serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import IsAdminUser, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.access import WRITE_BILLING, principal_of, scoped
from common.errors import error_response
from common.fields import IdentifierField, MonthField, StrictCharField
from common.filters import ListFilter, code_filter
from contracts.models import Contract

from .dependencies import set_dependency
from .models import CustomerDependency, Exclusion, ExclusionAppeal, ServiceCredit, SlaAlert, SlaReport
from .pdf import LANGUAGES, render_report_pdf
from .selectors import DependencyStatus, dependency_statuses, reports_for
from .services import appeal_exclusion, declare_exclusion


class ReportSummarySerializer(serializers.ModelSerializer):
    contract = serializers.CharField(source="contract.code")
    tenant = serializers.CharField(source="contract.tenant.code")

    class Meta:
        model = SlaReport
        fields = [
            "id",
            "contract",
            "tenant",
            "month",
            "status",
            "valid_count",
            "credit_percent",
            "computed_at",
        ]


class ReportSerializer(ReportSummarySerializer):
    class Meta:
        model = SlaReport
        fields = [
            "id",
            "contract",
            "tenant",
            "month",
            "time_zone",
            "period_start",
            "period_end",
            "status",
            "record_count",
            "rejected_count",
            "excluded_count",
            "valid_count",
            "terms",
            "objectives",
            "percentiles_ms",
            "daily",
            "exclusions",
            "credit_percent",
            "data_watermark",
            "ledger_checkpoint",
            "computed_at",
        ]


class ReportFilter(ListFilter):
    contract = code_filter("A contract code.")
    month = MonthField(required=False, help_text="YYYY-MM in the policy's time zone.")

    lookups = {"contract": "contract__code", "month": "month"}


@extend_schema_view(get=extend_schema(parameters=[ReportFilter]))
class ReportListView(generics.ListAPIView):
    """The caller's tenants' SLA reports; filter with ?contract=<code> and ?month=YYYY-MM."""

    serializer_class = ReportSummarySerializer

    def get_queryset(self):
        return ReportFilter.narrow(reports_for(self.request), self.request)


class ReportDetailView(generics.RetrieveAPIView):
    """One stored SLA report, as measured: objectives, budget, daily counts, exclusions and credit."""

    serializer_class = ReportSerializer

    def get_queryset(self):
        return reports_for(self.request)


class ReportPdfView(generics.GenericAPIView):
    """The report as a PDF, in English (?lang=en) or Simplified Chinese (?lang=zh-Hans)."""

    serializer_class = ReportSerializer

    def get_queryset(self):
        return reports_for(self.request)

    @extend_schema(
        parameters=[OpenApiParameter("lang", str, enum=list(LANGUAGES), default="en")],
        responses={(200, "application/pdf"): OpenApiTypes.BINARY},
    )
    def get(self, request: Request, *args: object, **kwargs: object) -> HttpResponse:
        report = self.get_object()
        language = request.query_params.get("lang", "en")
        if language not in LANGUAGES:
            return error_response(
                400,
                "unsupported_language",
                f"lang must be one of {', '.join(LANGUAGES)}.",
                {"lang": language},
            )
        pdf = render_report_pdf(report, language)  # a broken font install: 503 pdf_font_missing
        response = HttpResponse(pdf, content_type="application/pdf")
        response["Content-Disposition"] = (
            f'inline; filename="sla-{report.contract.code}-{report.month}-{language}.pdf"'
        )
        return response


class CreditSerializer(serializers.ModelSerializer):
    contract = serializers.CharField(source="contract.code")

    class Meta:
        model = ServiceCredit
        fields = [
            "id",
            "contract",
            "month",
            "report",
            "credit_percent",
            "fee_basis",
            "amount",
            "currency",
            "description",
            "status",
            "invoice",
            "applied_at",
            "held_reason",
        ]


class CreditListView(generics.ListAPIView):
    """The caller's tenants' service credits."""

    serializer_class = CreditSerializer

    def get_queryset(self):
        credits = ServiceCredit.objects.select_related("contract")
        return scoped(credits, principal_of(self.request), "contract__tenant")


class ExclusionSerializer(serializers.ModelSerializer):
    contract = serializers.SlugRelatedField(slug_field="code", queryset=Contract.objects.all())
    declared_by = serializers.CharField(
        source="declared_by.username", read_only=True, allow_null=True, help_text="null: detected"
    )
    detected_by = serializers.CharField(
        source="detected_by.name",
        read_only=True,
        allow_null=True,
        help_text="The watched dependency whose outage opened it (null: declared by a person).",
    )

    class Meta:
        model = Exclusion
        fields = [
            "id",
            "contract",
            "kind",
            "scope",
            "starts_at",
            "ends_at",
            "reason",
            "declared_by",
            "declared_at",
            "detected_by",
            "closed",
        ]
        read_only_fields = ["id", "declared_by", "declared_at", "detected_by", "closed"]


class ExclusionListView(generics.ListCreateAPIView):
    """GET: the caller's tenants' exclusions. POST (staff): declare one; the same again returns it (200)."""

    serializer_class = ExclusionSerializer

    def get_permissions(self):
        return [IsAdminUser()] if self.request.method == "POST" else [IsAuthenticated()]

    def get_queryset(self):
        exclusions = Exclusion.objects.select_related("contract", "declared_by", "detected_by")
        return scoped(exclusions, principal_of(self.request), "contract__tenant")

    def create(self, request: Request, *args: object, **kwargs: object) -> Response:
        serializer = ExclusionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            exclusion, created = declare_exclusion(
                data["contract"],
                kind=data["kind"],
                scope=data.get("scope", Exclusion.Scope.ALL),
                starts_at=data["starts_at"],
                ends_at=data["ends_at"],
                reason=data["reason"],
                declared_by=request.user,  # type: ignore[arg-type]
            )
        except ModelValidationError as error:
            raise ValidationError(
                error.message_dict if hasattr(error, "error_dict") else error.messages
            ) from error
        return Response(
            ExclusionSerializer(exclusion).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class AlertSerializer(serializers.ModelSerializer):
    contract = serializers.CharField(source="contract.code")

    class Meta:
        model = SlaAlert
        fields = [
            "id",
            "contract",
            "kind",
            "rule",
            "subject",
            "severity",
            "fired_at",
            "resolved_at",
            "measured",
        ]


class AlertFilter(ListFilter):
    open = serializers.BooleanField(required=False, help_text="Only alerts not yet resolved.")

    lookups = {"open": lambda only_open: Q(resolved_at__isnull=True) if only_open else Q()}


@extend_schema_view(get=extend_schema(parameters=[AlertFilter]))
class AlertListView(generics.ListAPIView):
    """The caller's tenants' SLA alerts (burn rate, route jitter, silent experts), newest first."""

    serializer_class = AlertSerializer

    def get_queryset(self):
        alerts = scoped(
            SlaAlert.objects.select_related("contract"), principal_of(self.request), "contract__tenant"
        )
        return AlertFilter.narrow(alerts, self.request)


class DependencyBodySerializer(serializers.Serializer):
    name = IdentifierField(max_length=200)
    health_url = serializers.URLField(max_length=2000, help_text="GET every minute; 2xx or 3xx is healthy.")


class DependencySerializer(serializers.Serializer):
    contract = serializers.CharField(source="dependency.contract.code")
    name = serializers.CharField(source="dependency.name")
    health_url = serializers.CharField(source="dependency.health_url")
    state = serializers.ChoiceField(choices=["unknown", "healthy", "failing", "outage"])
    last_checked_at = serializers.DateTimeField(source="last_check.checked_at", allow_null=True)
    last_status_code = serializers.IntegerField(source="last_check.status_code", allow_null=True)
    last_error = serializers.CharField(source="last_check.error", allow_null=True)
    failing_since = serializers.DateTimeField(allow_null=True)
    open_exclusion = serializers.IntegerField(source="open_outage.pk", allow_null=True)


def _dependencies_of(request: Request) -> list[DependencyStatus]:
    watched = CustomerDependency.objects.all()
    return dependency_statuses(scoped(watched, principal_of(request), "contract__tenant"))


class DependencyListView(generics.GenericAPIView):
    """The caller's tenants' watched dependencies and their state; their outages are exclusions
    (`/v1/sla/exclusions`, `detected_by`)."""

    permission_classes = [IsAuthenticated]
    serializer_class = DependencySerializer
    pagination_class = None  # a tenant watches a few systems: one plain list

    @extend_schema(responses={200: DependencySerializer(many=True)})
    def get(self, request: Request) -> Response:
        return Response(DependencySerializer(_dependencies_of(request), many=True).data)


class DependencyView(generics.GenericAPIView):
    """PUT (staff): watch a contract's dependency at a health URL (the same PUT again changes nothing)."""

    permission_classes = [IsAdminUser]
    serializer_class = DependencySerializer

    @extend_schema(request=DependencyBodySerializer, responses={200: DependencySerializer})
    def put(self, request: Request, code: str) -> Response | HttpResponse:
        body = DependencyBodySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        contract = Contract.objects.filter(code=code).first()
        if contract is None:
            return error_response(404, "unknown_contract", f"No contract {code!r}.")
        dependency = set_dependency(contract, body.validated_data["name"], body.validated_data["health_url"])
        [found] = dependency_statuses(CustomerDependency.objects.filter(pk=dependency.pk))
        return Response(DependencySerializer(found).data)


class AppealBodySerializer(serializers.Serializer):
    reason = StrictCharField(max_length=5000, help_text="Why the exclusion is wrong.")


class AppealSerializer(serializers.ModelSerializer):
    exclusion = serializers.IntegerField(source="exclusion_id")

    class Meta:
        model = ExclusionAppeal
        fields = ["id", "exclusion", "reason", "status", "opened_at", "evidence"]


class ExclusionAppealView(generics.GenericAPIView):
    """POST (owner or billing member): contest an exclusion of one of the caller's contracts; the window's
    evidence (its raw batch hashes, the digest of its logged records, the watch's checks) is attached.
    Retry: a second appeal while one is open answers 409 appeal_open."""

    serializer_class = AppealSerializer
    write_roles = WRITE_BILLING

    @extend_schema(request=AppealBodySerializer, responses={201: AppealSerializer})
    def post(self, request: Request, pk: int) -> Response | HttpResponse:
        principal = principal_of(request)
        if principal.is_staff:
            return error_response(403, "customers_only", "An appeal is the customer's; staff answer it.")
        body = AppealBodySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        appeal = appeal_exclusion(request.user, principal, pk, body.validated_data["reason"])  # type: ignore[arg-type]
        return Response(AppealSerializer(appeal).data, status=status.HTTP_201_CREATED)
