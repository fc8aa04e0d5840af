"""The package factory's API: industry templates, builds from an uploaded ONNX model, and the model
files the deployment manifests fetch by digest."""

from __future__ import annotations

from django.conf import settings
from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import WRITE_ANY, principal_of
from common.errors import RequestTooLarge, error_response
from common.pagination import CursorPage
from common.parsers import loads

from .models import PackageBuild
from .selectors import artifact_of, package_builds
from .services import PLAN_CODE, build_package
from .templates import templates

MULTIPART_SLACK = 64 * 1024  # the declaration and the form's boundaries beside the model file


class TemplateSerializer(serializers.Serializer):
    code = serializers.CharField()
    industry = serializers.CharField()
    name = serializers.DictField(child=serializers.CharField(), help_text="By language: en, zh-hans.")
    description = serializers.DictField(child=serializers.CharField())
    spec = serializers.JSONField(help_text="The declaration without its codes; yours is merged over it.")


class TemplateListView(APIView):
    """The industry templates a package can start from."""

    @extend_schema(responses={200: TemplateSerializer(many=True)})
    def get(self, request: Request) -> Response:
        principal_of(request)  # members of a tenant and staff only
        return Response(TemplateSerializer(templates(), many=True).data)


class BuildSerializer(serializers.ModelSerializer):
    package = serializers.CharField(source="package.code")
    capability = serializers.CharField(source="capability.code")
    model_id = serializers.CharField(source="capability.model_id")
    artifact_sha256 = serializers.CharField(source="capability.artifact_id")
    plan = serializers.SerializerMethodField()

    class Meta:
        model = PackageBuild
        fields = [
            "package",
            "capability",
            "model_id",
            "artifact_sha256",
            "plan",
            "template",
            "spec",
            "quote",
            "executor_config",
            "compose_service",
            "kubernetes_manifest",
            "build_seconds",
            "created_at",
        ]

    def get_plan(self, build: PackageBuild) -> str:
        return f"{build.package.code}/{PLAN_CODE}"


class BuildRequestSerializer(serializers.Serializer):
    model = serializers.FileField(help_text="The ONNX model file.")
    declaration = serializers.CharField(
        help_text="The package declaration, a JSON object (see the templates)."
    )
    template = serializers.CharField(
        required=False, allow_blank=True, help_text="An industry template's code."
    )


class ByCreated(CursorPage):
    ordering = "-created_at"


class BuildListView(generics.ListAPIView):
    """The tenant's package builds. POST: build a package from an ONNX model (multipart/form-data)."""

    serializer_class = BuildSerializer
    pagination_class = ByCreated
    parser_classes = [MultiPartParser]
    write_roles = WRITE_ANY

    def get_queryset(self) -> QuerySet[PackageBuild]:
        return package_builds(principal_of(self.request))

    @extend_schema(request={"multipart/form-data": BuildRequestSerializer}, responses={201: BuildSerializer})
    def post(self, request: Request) -> Response:
        limit = int(settings.FACTORY_MAX_MODEL_BYTES)
        if int(request.META.get("CONTENT_LENGTH") or 0) > limit + MULTIPART_SLACK:
            raise RequestTooLarge(limit + MULTIPART_SLACK)
        body = BuildRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        build = build_package(
            principal_of(request),
            loads(data["declaration"]),
            data["model"].read(),
            template_code=data.get("template", ""),
        )
        return Response(BuildSerializer(build).data, status=status.HTTP_201_CREATED)


class BuildDetailView(generics.RetrieveAPIView):
    serializer_class = BuildSerializer
    lookup_field = "package__code"
    lookup_url_kwarg = "code"

    def get_queryset(self) -> QuerySet[PackageBuild]:
        return package_builds(principal_of(self.request))


class ArtifactView(APIView):
    """An ONNX model file by its SHA-256, for the executor's models volume."""

    @extend_schema(responses={(200, "application/octet-stream"): OpenApiTypes.BINARY})
    def get(self, request: Request, sha256: str) -> HttpResponse:
        artifact = artifact_of(principal_of(request), sha256)
        if artifact is None:
            return error_response(404, "not_found", "No such model file.")
        answer = HttpResponse(bytes(artifact.content), content_type="application/octet-stream")
        answer["Content-Disposition"] = f'attachment; filename="{sha256}.onnx"'
        return answer
