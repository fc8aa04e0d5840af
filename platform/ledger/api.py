"""/v1/ledger/...: checkpoints, proofs, invoice exports, completeness. Thin: logic is in selectors/services.

Tenant isolation: staff see everything; any other caller acts for its tenant (accounts.access) and
gets 404 for records and invoices of other tenants. Checkpoints and consistency proofs are global (they
hold only hashes), so every signed-in user may read them.

The serializers below document and shape the answers: the selectors build plain dicts, and each view
passes them through its serializer, so the OpenAPI schema is the answer's real shape.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import wraps
from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse, JsonResponse
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers
from rest_framework.permissions import IsAdminUser, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import WRITE_BILLING, principal_of
from common.errors import error_response
from common.fields import IdentifierField
from ingest.outbox import store_pending

from . import selectors
from .models import Checkpoint, Dispute, LedgerEvent
from .services import CheckpointRefused, open_dispute, publish_checkpoint, resolve_dispute
from .store import Window

MAX_ID = 2**63 - 1  # PostgreSQL bigint


def _answers_errors(view: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(view)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return view(*args, **kwargs)
        except selectors.LedgerLookupError as error:
            return error_response(error.status, error.code, error.message)
        except CheckpointRefused as error:
            return error_response(409, "inconsistent_checkpoint", str(error))

    return wrapped


def _query(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    """Validated query parameters (400 invalid_request with the fields otherwise). A plain dict, not the
    QueryDict: DRF reads an empty value in form data as "not given", so `?size=` would pass unseen."""
    params = serializer_class(data=request.query_params.dict())
    params.is_valid(raise_exception=True)
    return dict(params.validated_data)


class AwareDateTimeField(serializers.DateTimeField):
    """ISO 8601 with an explicit offset: a bare local time would be ambiguous."""

    def to_internal_value(self, value: Any) -> datetime:
        parsed = parse_datetime(value) if isinstance(value, str) else None
        if parsed is None or parsed.tzinfo is None:
            self.fail("invalid", format="ISO 8601 with an offset, e.g. 2026-11-20T10:00:00Z")
        return super().to_internal_value(value)


# --- answers -----------------------------------------------------------------------------------------


class CheckpointSerializer(serializers.Serializer):
    size = serializers.IntegerField(help_text="Tree size: the number of logged records it covers.")
    root_hash = serializers.CharField(help_text="Base64 of the RFC 6962 root hash.")
    note = serializers.CharField(help_text="The signed checkpoint note (C2SP signed-note format).")
    reason = serializers.ChoiceField(choices=Checkpoint.Reason.choices)
    created_at = serializers.DateTimeField()


class InclusionProofSerializer(serializers.Serializer):
    record_id = serializers.UUIDField()
    leaf_index = serializers.IntegerField()
    leaf_hash = serializers.CharField(help_text="Base64.")
    tree_size = serializers.IntegerField()
    proof = serializers.ListField(child=serializers.CharField(), help_text="Base64 hashes, leaf to root.")
    checkpoint = serializers.CharField(help_text="The signed note of the checkpoint proved against.")


class ConsistencyProofSerializer(serializers.Serializer):
    from_size = serializers.IntegerField()
    to_size = serializers.IntegerField()
    proof = serializers.ListField(child=serializers.CharField(), help_text="Base64 hashes.")
    from_checkpoint = serializers.CharField()
    to_checkpoint = serializers.CharField()


def _seq_ranges(help_text: str) -> serializers.ListField:
    """[[first, last], ...] inclusive seq ranges."""
    pair = serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2)
    return serializers.ListField(child=pair, help_text=help_text)


class AgentCompletenessSerializer(serializers.Serializer):
    agent_id = serializers.CharField()
    batches = serializers.IntegerField()
    first_seq = serializers.IntegerField(required=False)
    last_seq = serializers.IntegerField(required=False)
    ranges = _seq_ranges("[first, last] seq ranges received.")
    gaps = _seq_ranges("[first, last] seq ranges still missing.")
    missing = serializers.IntegerField(required=False)
    complete = serializers.BooleanField()


class InvoiceAgentSerializer(serializers.Serializer):
    agent_id = serializers.CharField()
    records = serializers.IntegerField()
    first_seq = serializers.IntegerField()
    last_seq = serializers.IntegerField()
    gaps = _seq_ranges("[first, last] seq ranges still missing.")
    missing = serializers.IntegerField()


class InvoiceCompletenessSerializer(serializers.Serializer):
    invoice = serializers.IntegerField()
    contract = serializers.CharField()
    period_start = serializers.DateTimeField()
    period_end = serializers.DateTimeField()
    invoice_record_count = serializers.IntegerField()
    logged_records = serializers.IntegerField()
    excluded_records = serializers.IntegerField()
    agents = InvoiceAgentSerializer(many=True)
    complete = serializers.BooleanField()


class LedgerEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = LedgerEvent
        fields = ["id", "kind", "payload", "created_at", "delivered_at"]


class DisputeEventSerializer(serializers.Serializer):
    action = serializers.CharField()
    actor = serializers.CharField(allow_null=True, help_text="User name; null for the platform.")
    at = serializers.DateTimeField()
    detail = serializers.JSONField()


class DisputeSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    invoice = serializers.IntegerField()
    line = serializers.IntegerField()
    tenant = serializers.CharField()
    reason = serializers.CharField()
    status = serializers.ChoiceField(choices=Dispute.Status.choices)
    credited = serializers.DecimalField(max_digits=20, decimal_places=2)
    evidence = serializers.JSONField(
        help_text="Checkpoint, record digest, batches and gaps (docs/ledger.md)."
    )
    history = DisputeEventSerializer(many=True)


# --- requests ----------------------------------------------------------------------------------------


class InclusionQuery(serializers.Serializer):
    size = serializers.IntegerField(
        min_value=0, max_value=MAX_ID, required=False, help_text="Tree size (default: the latest)."
    )


class ConsistencyQuery(serializers.Serializer):
    from_ = serializers.IntegerField(min_value=0, max_value=MAX_ID, help_text="The older tree size.")
    to = serializers.IntegerField(min_value=0, max_value=MAX_ID, help_text="The newer tree size.")

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")  # a Python keyword
        return fields


class ExportQuery(serializers.Serializer):
    previous = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=MAX_ID),
        required=False,
        default=list,
        help_text="Tree sizes the verifier already holds (consistency proofs to each).",
    )


class WindowQuery(serializers.Serializer):
    start = AwareDateTimeField(help_text="ISO 8601 with an offset.")
    end = AwareDateTimeField(help_text="ISO 8601 with an offset; exclusive.")


class DisputeOpenSerializer(serializers.Serializer):
    line = serializers.IntegerField(min_value=1, max_value=MAX_ID, help_text="An invoice line id.")
    reason = serializers.CharField(max_length=2000)


class WindowSerializer(serializers.Serializer):
    start = AwareDateTimeField()
    end = AwareDateTimeField()
    status = IdentifierField(max_length=32, help_text="The record status excluded, e.g. error.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError("window end must follow its start.")
        return attrs


class DisputeResolveSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=["reject", "accept", "customer_dependency"])
    comment = serializers.CharField(max_length=2000, allow_blank=True, default="")
    amount = serializers.DecimalField(
        max_digits=20,
        decimal_places=2,
        min_value=0,
        required=False,
        allow_null=True,
        help_text="accept: the credit (default: what the line has left).",
    )
    records = serializers.ListField(
        child=serializers.UUIDField(), required=False, help_text="customer_dependency: record ids."
    )
    window = WindowSerializer(required=False, help_text="customer_dependency: a window and a status.")


# --- views -------------------------------------------------------------------------------------------


class CheckpointListView(generics.ListAPIView):
    """GET: signed checkpoints, newest first (cursor pages). POST (staff): publish one now."""

    permission_classes = [IsAuthenticated]
    serializer_class = CheckpointSerializer

    def get_queryset(self) -> QuerySet[Checkpoint]:
        return selectors.checkpoints()

    @extend_schema(operation_id="ledger_checkpoints_list")
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        data = CheckpointSerializer([selectors.checkpoint_json(c) for c in page or []], many=True).data
        return self.get_paginated_response(data)

    @extend_schema(
        operation_id="ledger_checkpoints_publish", request=None, responses={201: CheckpointSerializer}
    )
    @_answers_errors
    def post(self, request: Request) -> Response | JsonResponse:
        if not request.user.is_staff:
            return error_response(403, "permission_denied", "Only platform staff publish checkpoints.")
        checkpoint = publish_checkpoint(Checkpoint.Reason.MANUAL)
        return Response(CheckpointSerializer(selectors.checkpoint_json(checkpoint)).data, status=201)


class CheckpointDetailView(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(responses={200: CheckpointSerializer})
    @_answers_errors
    def get(self, request: Request, size: int) -> Response:
        return Response(
            CheckpointSerializer(selectors.checkpoint_json(selectors.checkpoint_of_size(size))).data
        )


class InclusionProofView(APIView):
    @extend_schema(parameters=[InclusionQuery], responses={200: InclusionProofSerializer})
    @_answers_errors
    def get(self, request: Request, record_id: Any) -> Response:
        tenant = principal_of(request).tenant_code
        size = _query(InclusionQuery, request).get("size")
        return Response(
            InclusionProofSerializer(selectors.inclusion_proof(str(record_id), size, tenant)).data
        )


class ConsistencyProofView(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("from", int, required=True, description="The older tree size."),
            OpenApiParameter("to", int, required=True, description="The newer tree size."),
        ],
        responses={200: ConsistencyProofSerializer},
    )
    @_answers_errors
    def get(self, request: Request) -> Response:
        sizes = _query(ConsistencyQuery, request)
        return Response(
            ConsistencyProofSerializer(selectors.consistency_proof(sizes["from"], sizes["to"])).data
        )


class InvoiceExportView(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("previous", int, many=True, description="Tree sizes the verifier holds.")
        ],
        responses={(200, "application/x-ndjson"): OpenApiTypes.STR},
    )
    @_answers_errors
    def get(self, request: Request, pk: int) -> HttpResponse:
        """NDJSON: the manifest line, then each record's canonical line (docs/ledger.md)."""
        query = ExportQuery(data={"previous": request.query_params.getlist("previous")})
        query.is_valid(raise_exception=True)
        previous = query.validated_data["previous"]
        invoice = selectors.invoice_for(pk, principal_of(request).tenant_code)
        store_pending()  # a leaf whose batch is still in the outbox is not missing from the store
        manifest, lines = selectors.invoice_export(invoice, previous)
        return HttpResponse(selectors.export_body(manifest, lines), content_type="application/x-ndjson")


class InvoiceCompletenessView(APIView):
    """The records an invoice covers and the gaps of the agents that served it (tenant-scoped)."""

    @extend_schema(responses={200: InvoiceCompletenessSerializer})
    @_answers_errors
    def get(self, request: Request, pk: int) -> Response:
        invoice = selectors.invoice_for(pk, principal_of(request).tenant_code)
        return Response(InvoiceCompletenessSerializer(selectors.invoice_completeness(invoice)).data)


class CompletenessView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(parameters=[WindowQuery], responses={200: AgentCompletenessSerializer})
    @_answers_errors
    def get(self, request: Request, agent_id: str) -> Response:
        window = _query(WindowQuery, request)
        report = selectors.completeness_report(agent_id, window["start"], window["end"])
        return Response(AgentCompletenessSerializer(report).data)


class LedgerEventListView(generics.ListAPIView):
    """Ledger events (gaps, checkpoint refusals) for platform staff, newest first."""

    permission_classes = [IsAdminUser]
    serializer_class = LedgerEventSerializer
    queryset = LedgerEvent.objects.all()


class DisputeListView(generics.ListAPIView):
    """GET: the caller's disputes (staff: all), newest first. POST {"line": id, "reason": text}: open one."""

    serializer_class = DisputeSerializer
    write_roles = WRITE_BILLING

    def get_queryset(self) -> QuerySet[Dispute]:
        return selectors.disputes(principal_of(self.request).tenant_code)

    @extend_schema(operation_id="ledger_disputes_list")
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        data = DisputeSerializer([selectors.dispute_json(d) for d in page or []], many=True).data
        return self.get_paginated_response(data)

    @extend_schema(
        operation_id="ledger_disputes_open", request=DisputeOpenSerializer, responses={201: DisputeSerializer}
    )
    @_answers_errors
    def post(self, request: Request) -> Response:
        body = DisputeOpenSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        tenant = principal_of(request).tenant_code
        dispute = open_dispute(
            request.user, body.validated_data["line"], body.validated_data["reason"], tenant
        )
        return Response(_dispute(dispute.pk), status=201)


class DisputeDetailView(APIView):
    @extend_schema(responses={200: DisputeSerializer})
    @_answers_errors
    def get(self, request: Request, pk: int) -> Response:
        dispute = selectors.disputes(principal_of(request).tenant_code).filter(pk=pk).first()
        if dispute is None:
            raise selectors.LedgerLookupError(404, "unknown_dispute", f"No dispute {pk}.")
        return Response(DisputeSerializer(selectors.dispute_json(dispute)).data)


class DisputeResolveView(APIView):
    """Finance: {"decision": "reject" or "accept", "comment": text, "amount": "12.30" (default: the line)},
    or {"decision": "customer_dependency", "comment": text, and "records": [record id, ...] or
    "window": {"start": ISO time, "end": ISO time, "status": "ok"}}."""

    permission_classes = [IsAdminUser]

    @extend_schema(request=DisputeResolveSerializer, responses={200: DisputeSerializer})
    @_answers_errors
    def post(self, request: Request, pk: int) -> Response:
        body = DisputeResolveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        records = data.get("records")
        window = data.get("window")
        dispute = resolve_dispute(
            request.user,
            pk,
            data["decision"],
            data["comment"],
            data.get("amount"),
            [str(r) for r in records] if records is not None else None,
            _window(window) if window is not None else None,
        )
        return Response(_dispute(dispute.pk))


def _dispute(pk: int) -> Any:
    return DisputeSerializer(selectors.dispute_json(selectors.disputes(None).get(pk=pk))).data


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _window(data: dict[str, Any]) -> Window:
    """A validated {"start", "end", "status"} → a Window in ns since the epoch."""
    start, end = ((data[k] - _EPOCH) // timedelta(microseconds=1) * 1000 for k in ("start", "end"))
    return Window(start, end, data["status"])
