from django.urls import path

from . import api, views

urlpatterns = [
    path("v1/sla/reports", api.ReportListView.as_view(), name="sla-report-list"),
    path("v1/sla/reports/<int:pk>", api.ReportDetailView.as_view(), name="sla-report-detail"),
    path("v1/sla/reports/<int:pk>/pdf", api.ReportPdfView.as_view(), name="sla-report-pdf"),
    path("v1/sla/exclusions", api.ExclusionListView.as_view(), name="sla-exclusion-list"),
    path("v1/sla/exclusions/<int:pk>/appeal", api.ExclusionAppealView.as_view(), name="sla-exclusion-appeal"),
    path("v1/sla/dependencies", api.DependencyListView.as_view(), name="sla-dependency-list"),
    path("v1/sla/dependencies/<str:code>", api.DependencyView.as_view(), name="sla-dependency"),
    path("v1/sla/alerts", api.AlertListView.as_view(), name="sla-alert-list"),
    path("v1/sla/credits", api.CreditListView.as_view(), name="sla-credit-list"),
    path("sla/reports/<int:pk>", views.report_page, name="sla-report-page"),
]
