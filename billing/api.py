from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field, extend_schema_view
from rest_framework import generics, serializers
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.views import APIView

from accounts.access import WRITE_ANY, principal_of, scoped
from common.errors import error_response
from common.fields import IdentifierField, StrictCharField
from common.filters import ListFilter, code_filter
from common.periods import month_bounds
from contracts.models import Contract
from contracts.services import check_currency
from pricing.dimensions import CHARGE_GROUP_NAMES
from pricing.errors import BillingError

from .models import Invoice, InvoiceLine, Note, Outcome
from .outcomes import decide_outcome, declare_outcome
from .pdf import render_invoice_pdf
from .selectors import (
    charge_groups,
    credit_balance,
    invoice_with_lines,
    tax_breakdown,
    visible_credit_notes,
    visible_invoices,
    visible_outcomes,
)
from .services import grant_credits
from .stripe_webhooks import handle_webhook


class InvoiceLineSerializer(serializers.ModelSerializer):
    class Meta:
        model = InvoiceLine
        fields = ["kind", "dimension", "description", "quantity", "unit_price", "amount", "details"]


class ChargeGroupSerializer(serializers.Serializer):
    group = serializers.ChoiceField(choices=list(CHARGE_GROUP_NAMES), help_text="routing, experts, cache, …")
    amount = serializers.DecimalField(max_digits=20, decimal_places=2)


class TaxRowSerializer(serializers.Serializer):
    code = serializers.CharField()
    name = serializers.CharField()
    rate = serializers.DecimalField(max_digits=6, decimal_places=4)
    base = serializers.DecimalField(max_digits=20, decimal_places=2)
    amount = serializers.DecimalField(max_digits=20, decimal_places=2)


class InvoiceSerializer(serializers.ModelSerializer):
    contract = serializers.CharField(source="contract.code")
    tenant = serializers.CharField(source="tenant.code")
    lines = InvoiceLineSerializer(many=True)
    charge_groups = serializers.SerializerMethodField(
        help_text="The usage lines added up as routing fee, expert fee, cache compensation, … "
        "(presentation only: the lines are what is priced)."
    )

    tax_breakdown = serializers.SerializerMethodField(help_text="The tax by rate, adding up to `tax`.")

    @extend_schema_field(TaxRowSerializer(many=True))
    def get_tax_breakdown(self, invoice: Invoice) -> list[dict[str, Any]]:
        return [
            {
                "code": t.code,
                "name": t.name,
                "rate": str(t.rate),
                "base": str(t.base),
                "amount": str(t.amount),
            }
            for t in tax_breakdown(invoice)
        ]

    @extend_schema_field(ChargeGroupSerializer(many=True))
    def get_charge_groups(self, invoice: Invoice) -> list[dict[str, Any]]:
        return [{"group": g.group, "amount": str(g.amount)} for g in charge_groups(invoice)]

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
            "credit_notes",
            "amount_due",
            "lines",
            "charge_groups",
            "tax_breakdown",
        ]


DETAIL_ONLY = ("lines", "charge_groups", "tax_breakdown")


class InvoiceSummarySerializer(InvoiceSerializer):
    class Meta(InvoiceSerializer.Meta):
        fields = [
            f for f in InvoiceSerializer.Meta.fields if f not in ("lines", "charge_groups", "tax_breakdown")
        ]


class InvoiceFilter(ListFilter):
    status = serializers.ChoiceField(choices=Invoice.Status.choices, required=False)
    period = serializers.RegexField(
        r"^\d{4}-\d{2}$", required=False, help_text="YYYY-MM: the period's month."
    )
    contract = code_filter("A contract code.")

    lookups = {"status": "status", "period": "period_start", "contract": "contract__code"}

    def validate_period(self, value: str) -> datetime:
        """The month's first instant (UTC), which is the period start of its invoices."""
        try:
            return month_bounds(value)[0]
        except ValueError as error:
            raise ValidationError(str(error)) from None


@extend_schema_view(get=extend_schema(parameters=[InvoiceFilter]))
class InvoiceListView(generics.ListAPIView):
    """The caller's invoices (staff: all), newest first, without lines (GET /v1/invoices/<id> has them)."""

    serializer_class = InvoiceSummarySerializer

    def get_queryset(self) -> QuerySet[Invoice]:
        return InvoiceFilter.narrow(visible_invoices(principal_of(self.request)), self.request)


class CreditNoteSerializer(serializers.ModelSerializer):
    invoice = serializers.IntegerField(source="invoice_id")
    invoice_number = serializers.CharField(source="invoice.number")
    contract = serializers.CharField(source="invoice.contract.code")
    currency = serializers.CharField(source="invoice.currency")
    line = serializers.IntegerField(source="line_id", allow_null=True)

    class Meta:
        model = Note
        fields = [
            "id",
            "number",
            "invoice",
            "invoice_number",
            "contract",
            "line",
            "reason",
            "amount",
            "currency",
            "created_at",
        ]


class CreditNoteFilter(ListFilter):
    invoice = serializers.IntegerField(required=False, min_value=1, max_value=2**63 - 1)
    contract = code_filter("A contract code.")

    lookups = {"invoice": "invoice_id", "contract": "invoice__contract__code"}


@extend_schema_view(get=extend_schema(parameters=[CreditNoteFilter]))
class CreditNoteListView(generics.ListAPIView):
    """The caller's credit notes (corrections lowering what a finalised invoice asks)."""

    serializer_class = CreditNoteSerializer

    def get_queryset(self) -> QuerySet[Note]:
        notes = visible_credit_notes(principal_of(self.request))
        return CreditNoteFilter.narrow(notes, self.request)


class CreditNoteDetailView(generics.RetrieveAPIView):
    serializer_class = CreditNoteSerializer

    def get_queryset(self) -> QuerySet[Note]:
        return visible_credit_notes(principal_of(self.request))


class InvoiceDetailView(generics.RetrieveAPIView):
    """An invoice with its lines: staff see every invoice, a customer only its own tenant's (others 404)."""

    serializer_class = InvoiceSerializer

    def get_queryset(self) -> QuerySet[Invoice]:
        return visible_invoices(principal_of(self.request)).prefetch_related("lines")


class CreditGrantSerializer(serializers.Serializer):
    amount = serializers.DecimalField(max_digits=20, decimal_places=2)
    currency = IdentifierField()
    reference = IdentifierField(max_length=100, help_text="Idempotency key: a retry returns the first grant.")


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

    @extend_schema(
        parameters=[OpenApiParameter("lang", str, enum=["en", "zh-Hans"], default="en")],
        responses={(200, "application/pdf"): OpenApiTypes.BINARY},
    )
    def get(self, request: Request, pk: int) -> Any:
        invoice = visible_invoices(principal_of(request)).filter(pk=pk).first()
        if invoice is None:
            return error_response(404, "invoice_not_found", f"No invoice {pk}.")
        language = request.query_params.get("lang", "en")
        pdf = render_invoice_pdf(invoice_with_lines(pk), language)
        response = HttpResponse(pdf, content_type="application/pdf")
        response["Content-Disposition"] = f'inline; filename="invoice-{invoice.number or pk}-{language}.pdf"'
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


class OutcomeReadSerializer(serializers.ModelSerializer):
    contract = serializers.CharField(source="contract.code")
    type = serializers.CharField(source="kind")
    credit_note = serializers.CharField(source="credit_note.number", allow_null=True, default=None)

    class Meta:
        model = Outcome
        fields = [
            "id",
            "contract",
            "ref",
            "type",
            "value",
            "status",
            "decided_by",
            "declared_at",
            "window_ends_at",
            "credit_note",
        ]


class OutcomeFilter(ListFilter):
    status = serializers.ChoiceField(choices=Outcome.Status.choices, required=False)
    contract = code_filter("A contract code.")

    lookups = {"status": "status", "contract": "contract__code"}


class OutcomeSerializer(serializers.Serializer):
    contract = IdentifierField(max_length=64)
    ref = IdentifierField(max_length=128)
    type = IdentifierField(max_length=64)
    value = serializers.DecimalField(max_digits=20, decimal_places=6)
    currency = IdentifierField(required=False)


def _outcome_json(outcome: Outcome) -> dict[str, Any]:
    return dict(OutcomeReadSerializer(outcome).data)


@extend_schema_view(get=extend_schema(parameters=[OutcomeFilter]))
class OutcomeDeclareView(generics.ListAPIView):
    """GET: the caller's declared outcomes. POST: a customer (or staff) declares an outcome; the same ref
    again returns the first declaration."""

    write_roles = WRITE_ANY
    serializer_class = OutcomeReadSerializer

    def get_queryset(self) -> QuerySet[Outcome]:
        return OutcomeFilter.narrow(visible_outcomes(principal_of(self.request)), self.request)

    @extend_schema(request=OutcomeSerializer, responses={201: OutcomeReadSerializer})
    def post(self, request: Request) -> Any:
        principal = principal_of(request)
        body = OutcomeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        contract = scoped(Contract.objects.filter(code=data["contract"]), principal).first()
        if contract is None:
            return error_response(404, "contract_not_found", f"No contract {data['contract']!r}.")
        check_currency(contract, data.get("currency"))
        outcome = declare_outcome(contract, data["ref"], data["type"], data["value"], timezone.now())
        return JsonResponse(_outcome_json(outcome), status=201)


class OutcomeDecisionSerializer(serializers.Serializer):
    reason = StrictCharField(max_length=200, required=False, default="", allow_blank=True)


class OutcomeDecisionView(APIView):
    """The customer confirms or revokes an outcome inside its verification window."""

    decision = ""
    write_roles = WRITE_ANY

    @extend_schema(request=OutcomeDecisionSerializer, responses={200: OutcomeReadSerializer})
    def post(self, request: Request, pk: int) -> Any:
        outcome = visible_outcomes(principal_of(request)).filter(pk=pk).first()
        if outcome is None:
            return error_response(404, "outcome_not_found", f"No outcome {pk}.")
        body = OutcomeDecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        outcome = decide_outcome(
            outcome, self.decision == "confirm", timezone.now(), body.validated_data["reason"]
        )
        return JsonResponse(
            _outcome_json(Outcome.objects.select_related("contract", "credit_note").get(pk=pk))
        )
