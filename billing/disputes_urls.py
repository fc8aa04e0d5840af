"""The billing-owned routes under /v1/ledger/ (included from config.urls): invoice exports, invoice
completeness and disputes. URL names are the ones they always had."""

from django.urls import path

from . import disputes_api as api

urlpatterns = [
    path("invoices/<int:pk>/export", api.InvoiceExportView.as_view(), name="ledger-invoice-export"),
    path(
        "invoices/<int:pk>/completeness",
        api.InvoiceCompletenessView.as_view(),
        name="ledger-invoice-completeness",
    ),
    path("disputes", api.DisputeListView.as_view(), name="ledger-disputes"),
    path("receipts/dispute", api.ReceiptDisputeView.as_view(), name="ledger-receipt-dispute"),
    path("disputes/<int:pk>", api.DisputeDetailView.as_view(), name="ledger-dispute"),
    path("disputes/<int:pk>/resolve", api.DisputeResolveView.as_view(), name="ledger-dispute-resolve"),
]
