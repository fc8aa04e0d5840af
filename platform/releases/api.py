"""The release plans' API: staff make a plan and note its stages; the customer's tenant reads its plans
and promotes a stage whose promotion is manual, once its gate holds."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import WRITE_ANY, principal_of
from common.errors import ApiError
from common.fields import IdentifierField, StrictBooleanField

from .models import ReleasePlan, ReleaseStage
from .selectors import plan_of, stage_of, visible_plans
from .services import CapabilitySpec, PlanSpec, StageSpec, add_stage_note, create_plan, promote_plan

NOTE_MAX_CHARS = 4000
IN_FORCE = (ReleaseStage.Status.ACTIVE, ReleaseStage.Status.HELD)


class StaffOnly(ApiError):
    http_status = 403

    def __init__(self, action: str) -> None:
        super().__init__("permission_denied", f"Only platform staff {action}.")


class ReleaseStageCapabilitySerializer(serializers.Serializer):
    capability = IdentifierField(max_length=64, source="capability.code")
    model_id = serializers.CharField(source="capability.model_id", read_only=True)
    hourly_cap = serializers.IntegerField(min_value=0, allow_null=True, required=False, default=None)
    gated = StrictBooleanField(required=False, default=True)


class ReleaseNoteSerializer(serializers.Serializer):
    text = IdentifierField(max_length=NOTE_MAX_CHARS)
    created_at = serializers.DateTimeField(read_only=True)


class ReleaseStageSerializer(serializers.Serializer):
    position = serializers.IntegerField(read_only=True)
    name = IdentifierField(max_length=200)
    status = serializers.CharField(read_only=True)
    billing_on = StrictBooleanField(required=False, default=False)
    promotion = serializers.ChoiceField(ReleaseStage.Promotion.choices, default=ReleaseStage.Promotion.MANUAL)
    gate_min_acceptance = serializers.DecimalField(
        max_digits=5, decimal_places=4, min_value=0, max_value=1, required=False, default=Decimal(0)
    )
    gate_min_calls = serializers.IntegerField(min_value=0, max_value=10**9, required=False, default=0)
    duration_hours = serializers.IntegerField(min_value=1, max_value=100_000, allow_null=True, required=False)
    started_at = serializers.DateTimeField(read_only=True, allow_null=True)
    window_started_at = serializers.DateTimeField(read_only=True, allow_null=True)
    ended_at = serializers.DateTimeField(read_only=True, allow_null=True)
    holds = serializers.IntegerField(read_only=True)
    capabilities = ReleaseStageCapabilitySerializer(many=True)
    notes = ReleaseNoteSerializer(many=True, read_only=True)


class ReleasePlanSerializer(serializers.Serializer):
    code = IdentifierField(max_length=64)
    name = IdentifierField(max_length=200)
    contract = IdentifierField(max_length=64, source="contract.code")
    package = IdentifierField(max_length=64, source="package.code", required=False, allow_blank=True)
    status = serializers.CharField(read_only=True)
    current_stage = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField(read_only=True)
    completed_at = serializers.DateTimeField(read_only=True, allow_null=True)
    stages = ReleaseStageSerializer(many=True)

    def get_current_stage(self, plan: ReleasePlan) -> int | None:
        stage = next((s for s in plan.stages.all() if s.status in IN_FORCE), None)
        return None if stage is None else stage.position


def plan_spec(data: dict[str, Any]) -> PlanSpec:
    """The validated body as the service's input."""
    return PlanSpec(
        code=data["code"],
        name=data["name"],
        contract=data["contract"]["code"],
        package=data.get("package", {}).get("code", ""),
        stages=[
            StageSpec(
                name=stage["name"],
                capabilities=[
                    CapabilitySpec(c["capability"]["code"], c["hourly_cap"], c["gated"])
                    for c in stage["capabilities"]
                ],
                billing_on=stage["billing_on"],
                promotion=stage["promotion"],
                gate_min_acceptance=stage["gate_min_acceptance"],
                gate_min_calls=stage["gate_min_calls"],
                duration_hours=stage.get("duration_hours"),
            )
            for stage in data["stages"]
        ],
    )


class PlanListView(generics.ListAPIView):
    """The release plans of the tenant's contracts. POST (staff): a plan, its first stage in force."""

    serializer_class = ReleasePlanSerializer
    write_roles = WRITE_ANY

    def get_queryset(self) -> QuerySet[ReleasePlan]:
        return visible_plans(principal_of(self.request))

    @extend_schema(request=ReleasePlanSerializer, responses={201: ReleasePlanSerializer})
    def post(self, request: Request) -> Response:
        if not principal_of(request).is_staff:
            raise StaffOnly("make release plans")
        body = ReleasePlanSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        plan = create_plan(spec=plan_spec(body.validated_data), now=timezone.now())
        answer = ReleasePlanSerializer(plan_of(principal_of(request), plan.code)).data
        return Response(answer, status=status.HTTP_201_CREATED)


class PlanDetailView(APIView):
    @extend_schema(responses={200: ReleasePlanSerializer})
    def get(self, request: Request, code: str) -> Response:
        return Response(ReleasePlanSerializer(plan_of(principal_of(request), code)).data)


class PromoteView(APIView):
    """Promote the stage in force: 409 `gate_not_passed` (with the gate's figures) while its gate does not
    hold, `promotion_automatic` for a customer on an automatic stage, `plan_completed` after the last."""

    write_roles = WRITE_ANY

    @extend_schema(request=None, responses={200: ReleasePlanSerializer})
    def post(self, request: Request, code: str) -> Response:
        principal = principal_of(request)
        plan = plan_of(principal, code)
        promote_plan(plan=plan, principal=principal, now=timezone.now())
        return Response(ReleasePlanSerializer(plan_of(principal, code)).data)


class StageNoteView(APIView):
    """POST (staff): a note on a stage, which its report shows."""

    write_roles = WRITE_ANY

    @extend_schema(request=ReleaseNoteSerializer, responses={201: ReleaseNoteSerializer})
    def post(self, request: Request, code: str, position: int) -> Response:
        principal = principal_of(request)
        stage = stage_of(plan_of(principal, code), position)
        if not principal.is_staff:
            raise StaffOnly("write stage notes")
        body = ReleaseNoteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        note = add_stage_note(stage=stage, text=body.validated_data["text"], author_id=principal.user_id)
        return Response(ReleaseNoteSerializer(note).data, status=status.HTTP_201_CREATED)
