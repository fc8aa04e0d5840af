"""The portal's PDF downloads: the file itself, or a page that says why there is none.

The API's PDF endpoints answer an error as JSON, which a browser following a download link drops
without a word; the portal's links come here instead, so a customer reads the reason."""

from __future__ import annotations

from collections.abc import Callable

from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.translation import get_language

from accounts.access import Principal
from billing.pdf import render_invoice_pdf, render_note_pdf
from billing.selectors import invoice_with_lines
from common.errors import ApiError
from sla.pdf import render_report_pdf

from .. import selectors
from ..access import portal_view
from .common import error_message, page

PDF_LANGUAGES = ("en", "zh-Hans")


def _language(request: HttpRequest) -> str:
    """`?lang=` when given (en or zh-Hans), else the page's language."""
    asked = request.GET.get("lang") or ("zh-Hans" if (get_language() or "").lower() == "zh-hans" else "en")
    return asked if asked in PDF_LANGUAGES else "en"


def _pdf(
    request: HttpRequest,
    principal: Principal,
    section: str,
    back: str,
    name: str,
    render: Callable[[str], bytes],
) -> HttpResponse:
    language = _language(request)
    try:
        body = render(language)
    except ApiError as error:
        return page(
            request,
            "frontend/pdf_error.html",
            principal,
            section,
            status=error.http_status,
            back=back,
            reason=error_message(error),
            code=error.code,
        )
    response = HttpResponse(body, content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{name}-{language}.pdf"'
    return response


@portal_view()
def invoice_pdf(request: HttpRequest, principal: Principal, pk: int) -> HttpResponse:
    invoice = selectors.invoices(principal).filter(pk=pk).first()
    if invoice is None:
        raise Http404
    return _pdf(
        request,
        principal,
        "invoices",
        reverse("portal-invoice", args=[pk]),
        f"invoice-{invoice.number or pk}",
        lambda language: render_invoice_pdf(invoice_with_lines(pk), language),
    )


@portal_view()
def sla_report_pdf(request: HttpRequest, principal: Principal, pk: int) -> HttpResponse:
    report = selectors.sla_reports(principal).filter(pk=pk).first()
    if report is None:
        raise Http404
    return _pdf(
        request,
        principal,
        "sla",
        reverse("portal-sla-report", args=[pk]),
        f"sla-{report.contract.code}-{report.month}",
        lambda language: render_report_pdf(report, language),
    )


@portal_view()
def note_pdf(request: HttpRequest, principal: Principal, pk: int) -> HttpResponse:
    note = selectors.notes(principal).filter(pk=pk).first()
    if note is None:
        raise Http404
    return _pdf(
        request,
        principal,
        "notes",
        reverse("portal-notes"),
        f"note-{note.number}",
        lambda language: render_note_pdf(note, language),
    )
