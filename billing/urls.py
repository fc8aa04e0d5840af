from django.urls import path

from contracts.api import ChargeView, MetricView, TaxesView, TermsView

from .api import (
    CreditGrantView,
    CreditNoteDetailView,
    CreditNoteListView,
    InvoiceListView,
    InvoicePdfView,
    OutcomeDecisionView,
    OutcomeDeclareView,
    stripe_webhook,
)
from .contracts_api import ContractDetailView, ContractListView
from .events_api import ContractEventsView
from .purchases_api import PurchaseView

urlpatterns = [
    path("contracts", ContractListView.as_view(), name="contract-list"),
    path("contracts/<str:code>", ContractDetailView.as_view(), name="contract-detail"),
    path("contracts/<str:code>/charges/<str:dimension>", ChargeView.as_view(), name="contract-charge"),
    path("contracts/<str:code>/metrics/<str:metric>", MetricView.as_view(), name="contract-metric"),
    path("contracts/<str:code>/terms", TermsView.as_view(), name="contract-terms"),
    path("contracts/<str:code>/events", ContractEventsView.as_view(), name="contract-events"),
    path("contracts/<str:code>/taxes", TaxesView.as_view(), name="contract-taxes"),
    path("contracts/<str:code>/credits", CreditGrantView.as_view(), name="contract-credits"),
    path("invoices", InvoiceListView.as_view(), name="invoice-list"),
    path("invoices/<int:pk>.pdf", InvoicePdfView.as_view(), name="invoice-pdf"),
    path("credit-notes", CreditNoteListView.as_view(), name="credit-note-list"),
    path("credit-notes/<int:pk>", CreditNoteDetailView.as_view(), name="credit-note-detail"),
    path("stripe/webhook", stripe_webhook, name="stripe-webhook"),
    path("purchases", PurchaseView.as_view(), name="purchase"),
    path("outcomes", OutcomeDeclareView.as_view(), name="outcome-declare"),
    path(
        "outcomes/<int:pk>/confirm", OutcomeDecisionView.as_view(decision="confirm"), name="outcome-confirm"
    ),
    path("outcomes/<int:pk>/revoke", OutcomeDecisionView.as_view(decision="revoke"), name="outcome-revoke"),
]
