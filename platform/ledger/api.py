"""/v1/ledger/...: checkpoints, proofs, invoice exports, completeness. Thin: logic is in selectors/services.

Tenant isolation: staff see everything; any other user acts for the tenant of its TenantMembership and
gets 404 for records and invoices of other tenants. Checkpoints and consistency proofs are global (they
hold only hashes), so every signed-in user may read them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from functools import wraps
from typing import Any

from django.http import HttpResponse, JsonResponse
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import IsAdminUser, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.errors import error_response

from . import selectors
from .models import Checkpoint, LedgerEvent
from .services import CheckpointRefused, open_dispute, publish_checkpoint, resolve_dispute
from .store import Window


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


def _int_param(request: Request, name: str, default: int | None = None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit():
        raise selectors.LedgerLookupError(400, "invalid_request", f"{name} must be a non-negative integer.")
    return int(raw)


def _time_param(request: Request, name: str) -> datetime:
    value = parse_datetime(request.query_params.get(name) or "")
    if value is None or value.tzinfo is None:
        raise selectors.LedgerLookupError(
            400, "invalid_request", f"{name} must be an ISO 8601 time with zone."
        )
    return value


def _object(request: Request) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise selectors.LedgerLookupError(400, "invalid_request", "Send a JSON object.")
    return request.data


class CheckpointListView(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(operation_id="ledger_checkpoints_list")
    @_answers_errors
    def get(self, request: Request) -> Response:
        limit = min(_int_param(request, "limit", 100) or 100, 1000)
        return Response(
            {"checkpoints": [selectors.checkpoint_json(c) for c in selectors.checkpoints()[:limit]]}
        )

    @_answers_errors
    def post(self, request: Request) -> Response | JsonResponse:
        if not request.user.is_staff:
            return error_response(403, "permission_denied", "Only platform staff publish checkpoints.")
        return Response(selectors.checkpoint_json(publish_checkpoint(Checkpoint.Reason.MANUAL)), status=201)


class CheckpointDetailView(APIView):
    permission_classes = [IsAuthenticated]

    @_answers_errors
    def get(self, request: Request, size: int) -> Response:
        return Response(selectors.checkpoint_json(selectors.checkpoint_of_size(size)))


class InclusionProofView(APIView):
    permission_classes = [IsAuthenticated]

    @_answers_errors
    def get(self, request: Request, record_id: Any) -> Response:
        tenant = selectors.tenant_of(request.user)
        return Response(selectors.inclusion_proof(str(record_id), _int_param(request, "size"), tenant))


class ConsistencyProofView(APIView):
    permission_classes = [IsAuthenticated]

    @_answers_errors
    def get(self, request: Request) -> Response:
        old, new = _int_param(request, "from"), _int_param(request, "to")
        if old is None or new is None:
            raise selectors.LedgerLookupError(400, "invalid_request", "Give both from and to tree sizes.")
        return Response(selectors.consistency_proof(old, new))


class InvoiceExportView(APIView):
    permission_classes = [IsAuthenticated]

    @_answers_errors
    def get(self, request: Request, pk: int) -> HttpResponse:
        """NDJSON: the manifest line, then each record's canonical line (docs/ledger.md)."""
        invoice = selectors.invoice_for(pk, selectors.tenant_of(request.user))
        previous = request.query_params.getlist("previous")
        if not all(p.isdigit() for p in previous):
            raise selectors.LedgerLookupError(400, "invalid_request", "previous must be tree sizes.")
        manifest, lines = selectors.invoice_export(invoice, [int(p) for p in previous])
        return HttpResponse(selectors.export_body(manifest, lines), content_type="application/x-ndjson")


class InvoiceCompletenessView(APIView):
    """The records an invoice covers and the gaps of the agents that served it (tenant-scoped)."""

    permission_classes = [IsAuthenticated]

    @_answers_errors
    def get(self, request: Request, pk: int) -> Response:
        invoice = selectors.invoice_for(pk, selectors.tenant_of(request.user))
        return Response(selectors.invoice_completeness(invoice))


class CompletenessView(APIView):
    permission_classes = [IsAdminUser]

    @_answers_errors
    def get(self, request: Request, agent_id: str) -> Response:
        start, end = _time_param(request, "start"), _time_param(request, "end")
        return Response(selectors.completeness_report(agent_id, start, end))


class LedgerEventListView(APIView):
    permission_classes = [IsAdminUser]

    def get(self, request: Request) -> Response:
        events = LedgerEvent.objects.select_related("agent")[:500]
        return Response(
            {
                "events": [
                    {
                        "id": e.pk,
                        "kind": e.kind,
                        "payload": e.payload,
                        "created_at": e.created_at.isoformat(),
                        "delivered_at": e.delivered_at.isoformat() if e.delivered_at else None,
                    }
                    for e in events
                ]
            }
        )


class DisputeListView(APIView):
    """GET: the caller's disputes (staff: all). POST {"line": id, "reason": text}: open one."""

    permission_classes = [IsAuthenticated]

    @extend_schema(operation_id="ledger_disputes_list")
    @_answers_errors
    def get(self, request: Request) -> Response:
        rows = selectors.disputes(selectors.tenant_of(request.user))[:500]
        return Response({"disputes": [selectors.dispute_json(d) for d in rows]})

    @_answers_errors
    def post(self, request: Request) -> Response:
        tenant = selectors.tenant_of(request.user)
        data = _object(request)
        line, reason = data.get("line"), data.get("reason")
        if not isinstance(line, int) or not isinstance(reason, str):
            raise selectors.LedgerLookupError(400, "invalid_request", "Give line (an id) and reason (text).")
        dispute = open_dispute(request.user, line, reason, tenant)
        return Response(selectors.dispute_json(selectors.disputes(None).get(pk=dispute.pk)), status=201)


class DisputeDetailView(APIView):
    permission_classes = [IsAuthenticated]

    @_answers_errors
    def get(self, request: Request, pk: int) -> Response:
        dispute = selectors.disputes(selectors.tenant_of(request.user)).filter(pk=pk).first()
        if dispute is None:
            raise selectors.LedgerLookupError(404, "unknown_dispute", f"No dispute {pk}.")
        return Response(selectors.dispute_json(dispute))


class DisputeResolveView(APIView):
    """Finance: {"decision": "reject" or "accept", "comment": text, "amount": "12.30" (default: the line)},
    or {"decision": "customer_dependency", "comment": text, and "records": [record id, ...] or
    "window": {"start": ISO time, "end": ISO time, "status": "ok"}}."""

    permission_classes = [IsAdminUser]

    @_answers_errors
    def post(self, request: Request, pk: int) -> Response:
        data = _object(request)
        decision, comment, raw = data.get("decision"), data.get("comment", ""), data.get("amount")
        try:
            amount = Decimal(str(raw)) if raw is not None else None
        except InvalidOperation:
            raise selectors.LedgerLookupError(400, "invalid_request", "amount must be a decimal.") from None
        if not isinstance(decision, str) or not isinstance(comment, str):
            raise selectors.LedgerLookupError(400, "invalid_request", "Give a decision and a comment.")
        records, window = data.get("records"), data.get("window")
        if records is not None and not (isinstance(records, list) and all(_is_uuid(r) for r in records)):
            raise selectors.LedgerLookupError(400, "invalid_request", "records is a list of record ids.")
        dispute = resolve_dispute(
            request.user,
            pk,
            decision,
            comment,
            amount,
            records,
            _window(window) if window is not None else None,
        )
        return Response(selectors.dispute_json(selectors.disputes(None).get(pk=dispute.pk)))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _is_uuid(value: Any) -> bool:
    try:
        return isinstance(value, str) and str(uuid.UUID(value)) == value
    except ValueError:
        return False


def _window(data: Any) -> Window:
    """{"start", "end" (ISO 8601 with an offset), "status"} → a Window; 400 otherwise."""
    moments = [
        parse_datetime(data.get(k) or "") if isinstance(data, dict) else None for k in ("start", "end")
    ]
    status = data.get("status") if isinstance(data, dict) else None
    if None in moments or any(m.tzinfo is None for m in moments if m) or not isinstance(status, str):
        raise selectors.LedgerLookupError(
            400, "invalid_request", "window needs start and end (ISO 8601 with an offset) and a status."
        )
    start, end = ((m - _EPOCH) // timedelta(microseconds=1) * 1000 for m in moments if m)
    if end <= start:
        raise selectors.LedgerLookupError(400, "invalid_request", "window end must follow its start.")
    return Window(start, end, status)
