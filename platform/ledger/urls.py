from django.urls import path

from . import api

# The other /v1/ledger/ routes (invoice exports and completeness, disputes, an agent's completeness)
# belong to billing and ingest: config.urls routes them.
urlpatterns = [
    path("checkpoints", api.CheckpointListView.as_view(), name="ledger-checkpoints"),
    path("checkpoint", api.LatestCheckpointView.as_view(), name="ledger-latest-checkpoint"),
    path("checkpoint-key", api.CheckpointKeysView.as_view(), name="ledger-checkpoint-key"),
    path("checkpoints/<int:size>", api.CheckpointDetailView.as_view(), name="ledger-checkpoint"),
    path("records/<uuid:record_id>/inclusion", api.InclusionProofView.as_view(), name="ledger-inclusion"),
    path("receipts/check", api.ReceiptCheckView.as_view(), name="ledger-receipt-check"),
    path("consistency", api.ConsistencyProofView.as_view(), name="ledger-consistency"),
    path("events", api.LedgerEventListView.as_view(), name="ledger-events"),
]
