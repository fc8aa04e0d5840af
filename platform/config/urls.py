from django.contrib import admin
from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from agents.api import AgentRegistrationView
from billing.api import InvoiceDetailView
from ingest.views import ingest_batches

urlpatterns = [
    path("admin/", admin.site.urls),
    path("v1/ingest/batches", ingest_batches, name="ingest-batches"),
    path("v1/agents", AgentRegistrationView.as_view(), name="agent-register"),
    path("v1/invoices/<int:pk>", InvoiceDetailView.as_view(), name="invoice-detail"),
    path("v1/schema", SpectacularAPIView.as_view(), name="schema"),
    path("v1/docs", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
]
