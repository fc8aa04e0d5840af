from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from agents.api import AgentRegistrationView
from billing.api import InvoiceDetailView
from entitlements import api as entitlements_api
from entitlements import lease_views
from entitlements import views as entitlements_views
from ingest.api import CompletenessView as AgentCompletenessView
from ingest.views import ingest_batches

from .metrics import metrics

# /v1/… answers errors as JSON {code, message, details} even for URLs no route matches.
handler400 = "common.errors.bad_request"
handler404 = "common.errors.not_found"
handler500 = "common.errors.server_error"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("v1/ingest/batches", ingest_batches, name="ingest-batches"),
    path("metrics", metrics, name="metrics"),
    path("v1/agents", AgentRegistrationView.as_view(), name="agent-register"),
    path("v1/", include("agents.urls")),  # model publisher keys; agents' manifest refusals
    path("v1/", include("scheduling.urls")),  # a router's scheduler events (protocol.SCHEDULER_EVENTS_PATH)
    path("v1/invoices/<int:pk>", InvoiceDetailView.as_view(), name="invoice-detail"),
    path("v1/", include("billing.urls")),
    path("v1/entitlements/snapshot", entitlements_views.snapshot, name="entitlements-snapshot"),
    path("v1/entitlements/leases", lease_views.grant, name="entitlements-lease-grant"),
    path(
        "v1/entitlements/leases/<uuid:lease_id>/settle",
        lease_views.settle,
        name="entitlements-lease-settle",
    ),
    path("v1/entitlements/platform-key", entitlements_views.platform_key, name="entitlements-platform-key"),
    path("v1/api-keys", entitlements_views.ApiKeyIssueView.as_view(), name="api-key-issue"),
    path(
        "v1/api-keys/<str:prefix>/revoke",
        entitlements_views.ApiKeyRevokeView.as_view(),
        name="api-key-revoke",
    ),
    path("v1/keys", entitlements_api.ApiKeyListView.as_view(), name="key-list"),
    path("v1/keys/<str:prefix>/revoke", entitlements_api.ApiKeyRevokeView.as_view(), name="key-revoke"),
    path("v1/ledger/", include("ledger.urls")),
    path("v1/ledger/", include("billing.disputes_urls")),  # invoice exports, completeness, disputes
    path(
        "v1/ledger/agents/<str:agent_id>/completeness",
        AgentCompletenessView.as_view(),
        name="ledger-completeness",
    ),
    path("v1/", include("accounts.urls")),
    path("v1/", include("catalog.urls")),
    path("v1/", include("package_factory.urls")),
    path("v1/", include("sandbox.urls")),
    path("v1/", include("releases.urls")),
    path("v1/", include("webhooks.urls")),
    path("v1/usage/", include("usage.urls")),
    path("i18n/", include("django.conf.urls.i18n")),
    path("finance/", include("finance.urls")),
    path("", include("sla.urls")),
    path("v1/schema", SpectacularAPIView.as_view(), name="schema"),
    path("v1/docs", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("", include("frontend.urls")),
]
