from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from agents.api import AgentRegistrationView
from billing.api import InvoiceDetailView
from entitlements import views as entitlements_views
from ingest.views import ingest_batches

urlpatterns = [
    path("admin/", admin.site.urls),
    path("v1/ingest/batches", ingest_batches, name="ingest-batches"),
    path("v1/agents", AgentRegistrationView.as_view(), name="agent-register"),
    path("v1/invoices/<int:pk>", InvoiceDetailView.as_view(), name="invoice-detail"),
    path("v1/", include("billing.urls")),
    path("v1/entitlements/snapshot", entitlements_views.snapshot, name="entitlements-snapshot"),
    path("v1/entitlements/platform-key", entitlements_views.platform_key, name="entitlements-platform-key"),
    path("v1/api-keys", entitlements_views.ApiKeyIssueView.as_view(), name="api-key-issue"),
    path(
        "v1/api-keys/<str:prefix>/revoke",
        entitlements_views.ApiKeyRevokeView.as_view(),
        name="api-key-revoke",
    ),
    path("v1/ledger/", include("ledger.urls")),
    path("", include("sla.urls")),
    path("v1/schema", SpectacularAPIView.as_view(), name="schema"),
    path("v1/docs", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
]
