"""/v1/ledger/invoices/<id>/export, /v1/ledger/invoices/<id>/completeness and /v1/ledger/disputes…:
the invoice export, what an invoice covers, and disputes of invoice lines. Billing owns them (they read
invoices and issue notes); their paths stay under the ledger's prefix (routed from config.urls through
billing.disputes_urls). Thin: logic is in billing.exports, billing.completeness, billing.evidence and
billing.disputes. Tenant isolation as in ledger.api: staff see everything, any other caller its tenant.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import PLATFORM, WRITE_BILLING, principal_of
from common.fields import IdentifierField
from ingest.outbox import store_pending
from ledger.api import MAX_ID, AwareDateTimeField, ReceiptSerializer, answers_errors, seq_ranges
from ledger.selectors import LedgerLookupError

from . import completeness, evidence, exports
from .disputes import open_dispute, open_receipt_dispute, resolve_dispute
from .evidence import Window
from .models import Dispute

# --- answers -----------------------------------------------------------------------------------------


class InvoiceAgentSerializer(serializers.Serializer):
    agent_id = serializers.CharField()
    records = serializers.IntegerField()
    first_seq = serializers.IntegerField()
    last_seq = serializers.IntegerField()
    gaps = seq_ranges("[first, last] seq ranges still missing.")
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


class ExportQuery(serializers.Serializer):
    previous = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=MAX_ID),
        required=False,
        default=list,
        help_text="Tree sizes the verifier already holds (consistency proofs to each).",
    )
    compress = serializers.ChoiceField(
        choices=["gzip"],
        required=False,
        help_text="gzip: the export gzip-compressed (about a tenth of the size); treemeter-verify reads "
        "it as it is, in memory.",
    )


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


class InvoiceExportView(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("previous", int, many=True, description="Tree sizes the verifier holds."),
            OpenApiParameter("compress", str, enum=["gzip"], description="gzip: the export compressed."),
        ],
        responses={
            (200, "application/x-ndjson"): OpenApiTypes.STR,
            (200, "application/gzip"): OpenApiTypes.BINARY,
        },
    )
    @answers_errors
    def get(self, request: Request, pk: int) -> HttpResponse:
        """NDJSON: the manifest line, then each record's canonical line (docs/ledger.md); with
        `compress=gzip`, that body gzip-compressed."""
        params: dict[str, Any] = {"previous": request.query_params.getlist("previous")}
        if "compress" in request.query_params:
            params["compress"] = request.query_params["compress"]
        query = ExportQuery(data=params)
        query.is_valid(raise_exception=True)
        previous = query.validated_data["previous"]
        invoice = exports.invoice_for(pk, principal_of(request))
        store_pending()  # a leaf whose batch is still in the outbox is not missing from the store
        manifest, lines = exports.invoice_export(invoice, previous)
        body = exports.export_body(manifest, lines)
        if query.validated_data.get("compress") == "gzip":
            response = HttpResponse(exports.compressed(body), content_type="application/gzip")
            response["Content-Disposition"] = f'attachment; filename="invoice-{invoice.pk}.ndjson.gz"'
            return response
        return HttpResponse(body, content_type="application/x-ndjson")


class InvoiceCompletenessView(APIView):
    """The records an invoice covers and the gaps of the agents that served it (tenant-scoped)."""

    @extend_schema(responses={200: InvoiceCompletenessSerializer})
    @answers_errors
    def get(self, request: Request, pk: int) -> Response:
        invoice = exports.invoice_for(pk, principal_of(request))
        return Response(InvoiceCompletenessSerializer(completeness.invoice_completeness(invoice)).data)


class DisputeListView(generics.ListAPIView):
    """GET: the caller's disputes (staff: all), newest first. POST {"line": id, "reason": text}: open one."""

    serializer_class = DisputeSerializer
    write_roles = WRITE_BILLING

    def get_queryset(self) -> QuerySet[Dispute]:
        return evidence.disputes(principal_of(self.request))

    @extend_schema(operation_id="ledger_disputes_list")
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        data = DisputeSerializer([evidence.dispute_json(d) for d in page or []], many=True).data
        return self.get_paginated_response(data)

    @extend_schema(
        operation_id="ledger_disputes_open", request=DisputeOpenSerializer, responses={201: DisputeSerializer}
    )
    @answers_errors
    def post(self, request: Request) -> Response:
        body = DisputeOpenSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        dispute = open_dispute(
            request.user, body.validated_data["line"], body.validated_data["reason"], principal_of(request)
        )
        return Response(_dispute(dispute.pk), status=201)


class ReceiptDisputeView(APIView):
    """POST {"receipt": token}: open a dispute with a receipt whose record is missing from the log after
    the contract's grace (``ledger.receipts``); 201 with the dispute. 409 ``receipt_not_evidence``,
    ``no_final_invoice``, ``dispute_open`` (a retry while it is open)."""

    write_roles = WRITE_BILLING

    @extend_schema(request=ReceiptSerializer, responses={201: DisputeSerializer})
    @answers_errors
    def post(self, request: Request) -> Response:
        body = ReceiptSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        dispute = open_receipt_dispute(request.user, body.validated_data["receipt"], principal_of(request))
        return Response(_dispute(dispute.pk), status=201)


class DisputeDetailView(APIView):
    @extend_schema(responses={200: DisputeSerializer})
    @answers_errors
    def get(self, request: Request, pk: int) -> Response:
        dispute = evidence.disputes(principal_of(request)).filter(pk=pk).first()
        if dispute is None:
            raise LedgerLookupError(404, "unknown_dispute", f"No dispute {pk}.")
        return Response(DisputeSerializer(evidence.dispute_json(dispute)).data)


class DisputeResolveView(APIView):
    """Finance: {"decision": "reject" or "accept", "comment": text, "amount": "12.30" (default: the line)},
    or {"decision": "customer_dependency", "comment": text, and "records": [record id, ...] or
    "window": {"start": ISO time, "end": ISO time, "status": "ok"}}."""

    permission_classes = [IsAdminUser]

    @extend_schema(request=DisputeResolveSerializer, responses={200: DisputeSerializer})
    @answers_errors
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
    return DisputeSerializer(evidence.dispute_json(evidence.disputes(PLATFORM).get(pk=pk))).data


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _window(data: dict[str, Any]) -> Window:
    """A validated {"start", "end", "status"} → a Window in ns since the epoch."""
    start, end = ((data[k] - _EPOCH) // timedelta(microseconds=1) * 1000 for k in ("start", "end"))
    return Window(start, end, data["status"])
