"""/v1/ledger/...: checkpoints, proofs, gap events. Thin: logic is in selectors/services.

The other /v1/ledger/ routes are served by the layers above that own their data: invoice exports,
invoice completeness and disputes by billing (billing.disputes_api), an agent's completeness by ingest
(ingest.api); config.urls routes them. They share the helpers here (errors, query parameters).

Tenant isolation: staff see everything; any other caller acts for its tenant (accounts.access) and
gets 404 for records and invoices of other tenants. Checkpoints and consistency proofs are global (they
hold only hashes), so every signed-in user may read them.

The serializers below document and shape the answers: the selectors build plain dicts, and each view
passes them through its serializer, so the OpenAPI schema is the answer's real shape.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import wraps
from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse, JsonResponse
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers
from rest_framework.permissions import AllowAny, IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import principal_of
from accounts.models import Role
from common.errors import error_response
from treemeter_records.receipts import RECEIPT_MAX_CHARS

from . import selectors
from .models import Checkpoint, LedgerEvent
from .receipts import RECEIPT_STATUSES, check_receipt
from .services import CheckpointRefused, publish_checkpoint

MAX_ID = 2**63 - 1  # PostgreSQL bigint


def answers_errors(view: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(view)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return view(*args, **kwargs)
        except selectors.LedgerLookupError as error:
            return error_response(error.status, error.code, error.message)
        except CheckpointRefused as error:
            return error_response(409, "inconsistent_checkpoint", str(error))

    return wrapped


def query_params(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
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


class CheckpointKeysSerializer(serializers.Serializer):
    origin = serializers.CharField(help_text="The log's origin line, also the note key's name.")
    note_verifier_key = serializers.CharField(
        help_text="The C2SP signed-note verifier key to pin: name+key hash+base64(0x01 ‖ public key)."
    )
    note_key_hash = serializers.CharField(
        help_text="C2SP key hash (8 hex): the first 4 bytes of each checkpoint signature line's blob."
    )
    key_id = serializers.CharField(
        help_text="The record format's id of the same key, ed25519:<16 hex>: not a note key hash."
    )
    public_key = serializers.CharField(help_text="Base64 of the raw 32-byte Ed25519 public key.")


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
    from_checkpoint = serializers.CharField(
        allow_null=True, help_text="The checkpoint published at from_size, if one was; null otherwise."
    )
    to_checkpoint = serializers.CharField()


def seq_ranges(help_text: str) -> serializers.ListField:
    """[[first, last], ...] inclusive seq ranges."""
    pair = serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2)
    return serializers.ListField(child=pair, help_text=help_text)


class LedgerEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = LedgerEvent
        fields = ["id", "kind", "payload", "created_at", "delivered_at"]


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


# --- views -------------------------------------------------------------------------------------------


class CheckpointListView(generics.ListAPIView):
    """GET, no sign-in: signed checkpoints, newest first (cursor pages); a witness or auditor needs no
    account (the log's size is all they tell, docs/ledger.md). POST (staff): publish one now."""

    permission_classes = [AllowAny]
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
    @answers_errors
    def post(self, request: Request) -> Response | JsonResponse:
        if not request.user.is_staff:
            return error_response(403, "permission_denied", "Only platform staff publish checkpoints.")
        checkpoint = publish_checkpoint(Checkpoint.Reason.MANUAL)
        return Response(CheckpointSerializer(selectors.checkpoint_json(checkpoint)).data, status=201)


class CheckpointKeysView(APIView):
    """GET, no sign-in: the key that signs the checkpoints, as a C2SP verifier key and by its two ids.
    Public on purpose: a witness or auditor needs it without an account, and it holds no tenant's data."""

    authentication_classes: list[type] = []
    permission_classes: list[type] = []

    @extend_schema(responses={200: CheckpointKeysSerializer}, auth=[])
    def get(self, request: Request) -> Response:
        return Response(CheckpointKeysSerializer(selectors.checkpoint_keys()).data)


class LatestCheckpointView(APIView):
    """GET, no sign-in: the latest signed checkpoint as the C2SP note itself, ``text/plain``."""

    authentication_classes: list[type] = []
    permission_classes: list[type] = []

    @extend_schema(
        auth=[],
        responses={(200, "text/plain"): OpenApiTypes.STR, 404: OpenApiTypes.OBJECT},
    )
    @answers_errors
    def get(self, request: Request) -> HttpResponse:
        note = selectors.checkpoint_of_size(None).note
        return HttpResponse(note, content_type="text/plain; charset=utf-8")


class CheckpointDetailView(APIView):
    permission_classes = [AllowAny]

    @extend_schema(responses={200: CheckpointSerializer})
    @answers_errors
    def get(self, request: Request, size: int) -> Response:
        return Response(
            CheckpointSerializer(selectors.checkpoint_json(selectors.checkpoint_of_size(size))).data
        )


class InclusionProofView(APIView):
    @extend_schema(parameters=[InclusionQuery], responses={200: InclusionProofSerializer})
    @answers_errors
    def get(self, request: Request, record_id: Any) -> Response:
        tenant = principal_of(request).tenant_code
        size = query_params(InclusionQuery, request).get("size")
        return Response(
            InclusionProofSerializer(selectors.inclusion_proof(str(record_id), size, tenant)).data
        )


class ConsistencyProofView(APIView):
    """GET, no sign-in: from any size (0 included) to a signed checkpoint's size."""

    permission_classes = [AllowAny]

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "from", int, required=True, description="The older tree size: any, 0 to the checkpoint's."
            ),
            OpenApiParameter("to", int, required=True, description="The size of a signed checkpoint."),
        ],
        responses={200: ConsistencyProofSerializer},
    )
    @answers_errors
    def get(self, request: Request) -> Response:
        sizes = query_params(ConsistencyQuery, request)
        return Response(
            ConsistencyProofSerializer(selectors.consistency_proof(sizes["from"], sizes["to"])).data
        )


class LedgerEventListView(generics.ListAPIView):
    """Ledger events (gaps, checkpoint refusals) for platform staff, newest first."""

    permission_classes = [IsAdminUser]
    serializer_class = LedgerEventSerializer
    queryset = LedgerEvent.objects.all()


class ReceiptSerializer(serializers.Serializer):
    receipt = serializers.CharField(
        max_length=RECEIPT_MAX_CHARS, trim_whitespace=True, help_text="The Treemeter-Receipt token."
    )


class ReceiptClaimsSerializer(serializers.Serializer):
    v = serializers.IntegerField()
    record_id = serializers.CharField()
    agent_id = serializers.CharField()
    seq = serializers.IntegerField()
    leaf_hash = serializers.CharField(help_text="Hex SHA-256(0x00 ‖ canonical record).")
    tenant = serializers.CharField()
    contract = serializers.CharField()
    start_ns = serializers.IntegerField()


class ReceiptCheckSerializer(serializers.Serializer):
    claims = ReceiptClaimsSerializer()
    key_id = serializers.CharField(help_text="The agent key that signed the receipt.")
    status = serializers.ChoiceField(choices=RECEIPT_STATUSES, help_text="ledger.receipts: what each means.")
    grace_ends = serializers.DateTimeField(help_text="When the contract's grace for the record's month ends.")
    record = serializers.JSONField(allow_null=True, help_text="The stored record (logged ones only).")
    line = serializers.CharField(allow_null=True, help_text="Its canonical line, whose leaf hash it is.")
    inclusion = InclusionProofSerializer(allow_null=True, help_text="Against the latest checkpoint.")


class ReceiptCheckView(APIView):
    """Check a receipt against the log: its signature by the agent it names, then whether its record is
    logged with the promised leaf hash, with the inclusion proof (``treemeter-verify receipt --proof``
    checks this answer offline). A read: posting it again changes nothing.

    400 ``invalid_receipt`` (not a receipt, or not signed by its agent's key); 404 ``unknown_receipt`` for
    another tenant's receipt."""

    write_roles = tuple(Role)  # a read sent as a POST (the token is the body): every role may check

    @extend_schema(request=ReceiptSerializer, responses={200: ReceiptCheckSerializer})
    @answers_errors
    def post(self, request: Request) -> Response:
        body = ReceiptSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        check = check_receipt(body.validated_data["receipt"], principal_of(request).tenant_code)
        return Response(ReceiptCheckSerializer(check.as_json()).data)
