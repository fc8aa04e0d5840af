from django.urls import path

from . import api

urlpatterns = [
    path("checkpoints", api.CheckpointListView.as_view(), name="ledger-checkpoints"),
    path("checkpoints/<int:size>", api.CheckpointDetailView.as_view(), name="ledger-checkpoint"),
    path("records/<uuid:record_id>/inclusion", api.InclusionProofView.as_view(), name="ledger-inclusion"),
    path("consistency", api.ConsistencyProofView.as_view(), name="ledger-consistency"),
    path("invoices/<int:pk>/export", api.InvoiceExportView.as_view(), name="ledger-invoice-export"),
    path(
        "invoices/<int:pk>/completeness",
        api.InvoiceCompletenessView.as_view(),
        name="ledger-invoice-completeness",
    ),
    path("agents/<str:agent_id>/completeness", api.CompletenessView.as_view(), name="ledger-completeness"),
    path("events", api.LedgerEventListView.as_view(), name="ledger-events"),
    path("disputes", api.DisputeListView.as_view(), name="ledger-disputes"),
    path("disputes/<int:pk>", api.DisputeDetailView.as_view(), name="ledger-dispute"),
    path("disputes/<int:pk>/resolve", api.DisputeResolveView.as_view(), name="ledger-dispute-resolve"),
]
