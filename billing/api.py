from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.views import APIView

from config.errors import error_response
from contracts.models import Contract
from contracts.services import check_currency

from .errors import BillingError
from .models import Invoice, InvoiceLine, Outcome
from .outcomes import decide_outcome, declare_outcome
from .payments import handle_webhook
from .pdf import render_invoice_pdf
from .selectors import credit_balance, invoice_with_lines
from .services import grant_credits


class InvoiceLineSerializer(serializers.ModelSerializer):
    class Meta:
        model = InvoiceLine
        fields = ["kind", "dimension", "description", "quantity", "unit_price", "amount", "details"]


class InvoiceSerializer(serializers.ModelSerializer):
    contract = serializers.CharField(source="contract.code")
    tenant = serializers.CharField(source="tenant.code")
    lines = InvoiceLineSerializer(many=True)

    class Meta:
        model = Invoice
        fields = [
            "id",
            "contract",
            "tenant",
            "period_start",
            "period_end",
            "currency",
            "status",
            "record_count",
            "number",
            "issuing_entity",
            "subtotal",
            "tax",
            "total",
            "credits_applied",
            "amount_due",
            "lines",
        ]


class InvoiceDetailView(generics.RetrieveAPIView):
    """An invoice with its lines: staff see every invoice, a customer only its own tenant's (others 404)."""

    serializer_class = InvoiceSerializer

    def get_queryset(self) -> QuerySet[Invoice]:
        invoices = Invoice.objects.select_related("contract", "tenant").prefetch_related("lines")
        tenant = _acting_tenant(self.request)
        if isinstance(tenant, JsonResponse):
            raise PermissionDenied("This user acts for no tenant.")
        return invoices if tenant is None else invoices.filter(tenant__code=tenant)


class CreditGrantSerializer(serializers.Serializer):
    amount = serializers.DecimalField(max_digits=20, decimal_places=2)
    currency = serializers.CharField()
    reference = serializers.CharField(
        max_length=100, help_text="Idempotency key: a retry returns the first grant."
    )


class CreditGrantView(APIView):
    """Staff add prepaid credits to a contract's wallet (append-only ledger)."""

    permission_classes = [IsAdminUser]

    @extend_schema(request=CreditGrantSerializer, responses={201: CreditGrantSerializer})
    def post(self, request: Request, code: str) -> Any:
        body = CreditGrantSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        contract = Contract.objects.filter(code=code).first()
        if contract is None:
            return error_response(404, "contract_not_found", f"No contract {code!r}.")
        check_currency(contract, body.validated_data["currency"])
        entry = grant_credits(contract, body.validated_data["amount"], body.validated_data["reference"])
        return JsonResponse(
            {
                "amount": str(entry.amount),
                "currency": contract.currency,
                "reference": entry.reference,
                "balance": str(credit_balance(contract.pk)),
            },
            status=201,
        )


class InvoicePdfView(APIView):
    """The invoice as a PDF; `?lang=zh-Hans` for Simplified Chinese (default English). Staff see every
    invoice, a customer only its own tenant's (others answer 404)."""

    def get(self, request: Request, pk: int) -> Any:
        tenant = _acting_tenant(request)
        if isinstance(tenant, JsonResponse):
            return tenant
        invoices = Invoice.objects.filter(pk=pk)
        invoice = (invoices if tenant is None else invoices.filter(tenant__code=tenant)).first()
        if invoice is None:
            return error_response(404, "invoice_not_found", f"No invoice {pk}.")
        pdf = render_invoice_pdf(invoice_with_lines(pk), request.query_params.get("lang", "en"))
        response = HttpResponse(pdf, content_type="application/pdf")
        response["Content-Disposition"] = f'inline; filename="invoice-{invoice.number or pk}.pdf"'
        return response


@csrf_exempt
@require_POST
def stripe_webhook(request: HttpRequest) -> JsonResponse:
    """Stripe calls this; the signature (not a session) authenticates it. Redeliveries answer 200."""
    try:
        event_type, handled = handle_webhook(request.body, request.headers.get("Stripe-Signature"))
    except BillingError as error:
        return error_response(error.http_status, error.code, error.message, error.details)
    return JsonResponse({"received": True, "type": event_type, "duplicate": not handled})


def _acting_tenant(request: Request) -> str | JsonResponse | None:
    """None for staff (every tenant), a customer's tenant code, or a 403 for a user of no tenant."""
    if request.user.is_staff:
        return None
    from ledger.models import TenantMembership  # the portal's user → tenant link

    membership = (
        TenantMembership.objects.select_related("tenant").filter(user_id=request.user.pk or 0).first()
    )
    if membership is None:
        return error_response(403, "no_tenant", "This user acts for no tenant.")
    return membership.tenant.code


class OutcomeSerializer(serializers.Serializer):
    contract = serializers.CharField()
    ref = serializers.CharField(max_length=128)
    type = serializers.CharField(max_length=64)
    value = serializers.DecimalField(max_digits=20, decimal_places=6)
    currency = serializers.CharField(required=False)


def _outcome_json(outcome: Outcome) -> dict[str, Any]:
    return {
        "id": outcome.pk,
        "contract": outcome.contract.code,
        "ref": outcome.ref,
        "type": outcome.kind,
        "value": str(outcome.value),
        "status": outcome.status,
        "decided_by": outcome.decided_by,
        "window_ends_at": outcome.window_ends_at.isoformat(),
        "credit_note": outcome.credit_note.number if outcome.credit_note else None,
    }


class OutcomeDeclareView(APIView):
    """A customer (or staff) declares an outcome; the same ref again returns the first declaration."""

    @extend_schema(request=OutcomeSerializer, responses={201: OutcomeSerializer})
    def post(self, request: Request) -> Any:
        tenant = _acting_tenant(request)
        if isinstance(tenant, JsonResponse):
            return tenant
        body = OutcomeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        contracts = Contract.objects.filter(code=data["contract"])
        contract = (contracts if tenant is None else contracts.filter(tenant__code=tenant)).first()
        if contract is None:
            return error_response(404, "contract_not_found", f"No contract {data['contract']!r}.")
        check_currency(contract, data.get("currency"))
        outcome = declare_outcome(contract, data["ref"], data["type"], data["value"], timezone.now())
        return JsonResponse(_outcome_json(outcome), status=201)


class OutcomeDecisionView(APIView):
    """The customer confirms or revokes an outcome inside its verification window."""

    decision = ""

    def post(self, request: Request, pk: int) -> Any:
        tenant = _acting_tenant(request)
        if isinstance(tenant, JsonResponse):
            return tenant
        outcomes = Outcome.objects.select_related("contract", "credit_note")
        outcome = (
            (outcomes if tenant is None else outcomes.filter(contract__tenant__code=tenant))
            .filter(pk=pk)
            .first()
        )
        if outcome is None:
            return error_response(404, "outcome_not_found", f"No outcome {pk}.")
        reason = str(request.data.get("reason", "")) if isinstance(request.data, dict) else ""
        outcome = decide_outcome(outcome, self.decision == "confirm", timezone.now(), reason)
        return JsonResponse(
            _outcome_json(Outcome.objects.select_related("contract", "credit_note").get(pk=pk))
        )
