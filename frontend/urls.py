"""The customer portal, mounted at "/" (config.urls)."""

from django.urls import path

from .views import (
    catalog,
    contracts,
    factory,
    home,
    invoices,
    keys,
    pdfs,
    receipts,
    records,
    releases,
    sandbox,
    sla,
    usage,
    webhooks,
)

urlpatterns = [
    path("", home.home, name="portal-home"),
    path("favicon.ico", home.favicon, name="favicon"),
    path("login/", home.LoginView.as_view(), name="portal-login"),
    path("logout/", home.LogoutView.as_view(), name="portal-logout"),
    path("packages/", catalog.packages, name="portal-packages"),
    path("packages/buy", catalog.buy, name="portal-buy"),
    path("model-prices/", catalog.model_price_list, name="portal-model-prices"),
    path("factory/", factory.factory, name="portal-factory"),
    path("factory/<str:code>", factory.factory_build, name="portal-factory-build"),
    path("sandbox/", sandbox.sandbox_page, name="portal-sandbox"),
    path("contracts/", contracts.contract_list, name="portal-contracts"),
    path("contracts/<str:code>", contracts.contract_detail, name="portal-contract"),
    path("usage/", usage.dashboard, name="portal-usage"),
    path("invoices/", invoices.invoice_list, name="portal-invoices"),
    path("invoices/<int:pk>", invoices.invoice_detail, name="portal-invoice"),
    path("invoices/<int:pk>/pdf", pdfs.invoice_pdf, name="portal-invoice-pdf"),
    path("invoices/<int:pk>/pay", invoices.pay_invoice, name="portal-invoice-pay"),
    path(
        "invoices/<int:pk>/lines/<int:line_pk>/records", records.line_record_list, name="portal-line-records"
    ),
    path("records/<uuid:record_id>", records.record_detail, name="portal-record"),
    path("invoices/<int:pk>/lines/<int:line_pk>/dispute", invoices.dispute_line, name="portal-dispute-line"),
    path("credit-notes/", invoices.note_list, name="portal-notes"),
    path("credit-notes/<int:pk>/pdf", pdfs.note_pdf, name="portal-note-pdf"),
    path("disputes/", invoices.dispute_list, name="portal-disputes"),
    path("disputes/<int:pk>", invoices.dispute_detail, name="portal-dispute"),
    path("receipts/", receipts.receipt_check, name="portal-receipts"),
    path("receipts/dispute", receipts.receipt_dispute, name="portal-receipt-dispute"),
    path("sla-reports/", sla.report_list, name="portal-sla-reports"),
    path("outages/<int:pk>/appeal", sla.appeal_outage, name="portal-outage-appeal"),
    path("sla-reports/<int:pk>", sla.report_detail, name="portal-sla-report"),
    path("sla-reports/<int:pk>/pdf", pdfs.sla_report_pdf, name="portal-sla-report-pdf"),
    path("api-keys/", keys.key_list, name="portal-keys"),
    path("api-keys/<str:prefix>/revoke", keys.key_revoke, name="portal-key-revoke"),
    path("releases/", releases.plan_list, name="portal-releases"),
    path("releases/<str:code>/stages/<int:position>", releases.stage_detail, name="portal-release-stage"),
    path(
        "releases/<str:code>/stages/<int:position>/pdf", releases.stage_pdf, name="portal-release-stage-pdf"
    ),
    path("webhooks/", webhooks.endpoint_list, name="portal-webhooks"),
    path("webhooks/<int:pk>", webhooks.endpoint_detail, name="portal-webhook"),
    path("webhooks/deliveries/<int:pk>/replay", webhooks.replay, name="portal-delivery-replay"),
]
