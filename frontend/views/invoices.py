"""Invoices with their lines, credit notes, and disputes opened from a line."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect

from accounts.access import WRITE_BILLING, Principal
from billing.disputes import open_dispute
from billing.models import SETTLED_DISPUTES, Dispute, Invoice, InvoiceLine
from ledger.selectors import LedgerLookupError

from .. import selectors
from ..access import READ_WRITE, portal_view
from .common import error_message, is_htmx, page, paginate

DISPUTABLE = (Invoice.Status.FINALIZED, Invoice.Status.PAID)


@portal_view()
def invoice_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    return page(
        request,
        "frontend/invoices.html",
        principal,
        "invoices",
        invoices=paginate(request, selectors.invoices(principal)),
    )


@portal_view()
def invoice_detail(request: HttpRequest, principal: Principal, pk: int) -> HttpResponse:
    invoice = selectors.invoice_detail(principal, pk)
    if invoice is None:
        raise Http404
    # The dispute a line shows: its open one, else the one that settled it (no new dispute then).
    shown = {d.line_id: d for d in invoice.disputes.all() if d.status in SETTLED_DISPUTES}
    shown.update({d.line_id: d for d in invoice.disputes.all() if d.status == Dispute.Status.OPEN})
    return page(
        request,
        "frontend/invoice.html",
        principal,
        "invoices",
        invoice=invoice,
        lines=[(line, shown.get(line.pk)) for line in invoice.lines.all()],
        disputable=invoice.status in DISPUTABLE,
        can_dispute=principal.may_write(WRITE_BILLING),
    )


def _line(principal: Principal, pk: int, line_pk: int) -> InvoiceLine:
    invoice = selectors.invoice_detail(principal, pk)
    line = invoice.lines.filter(pk=line_pk).first() if invoice else None
    if line is None:
        raise Http404
    return line


@portal_view(WRITE_BILLING, READ_WRITE)
def dispute_line(request: HttpRequest, principal: Principal, pk: int, line_pk: int) -> HttpResponse:
    """GET: the dispute form for one line (an htmx fragment, or a page). POST: open the dispute with its
    evidence (ledger.services.open_dispute) and show it, or the form again with the service's message."""
    line = _line(principal, pk, line_pk)
    fragment = "frontend/partials/dispute_form.html"
    template = fragment if is_htmx(request) else "frontend/dispute_new.html"
    if request.method != "POST":
        return page(request, template, principal, "invoices", line=line, reason="")
    reason = request.POST.get("reason", "")
    try:
        dispute = open_dispute(request.user, line.pk, reason, principal)
    except LedgerLookupError as error:
        # htmx swaps only 2xx answers: the fragment comes back 200 with the message in it.
        status = 200 if is_htmx(request) else error.status
        context = {"line": line, "reason": reason, "error": error_message(error)}
        return page(request, template, principal, "invoices", status=status, **context)
    if is_htmx(request):
        return page(request, "frontend/partials/dispute_opened.html", principal, "invoices", dispute=dispute)
    return redirect("portal-dispute", pk=dispute.pk)


@portal_view()
def note_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    return page(
        request,
        "frontend/notes.html",
        principal,
        "notes",
        notes=paginate(request, selectors.notes(principal)),
    )


@portal_view()
def dispute_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    return page(
        request,
        "frontend/disputes.html",
        principal,
        "disputes",
        disputes=paginate(request, selectors.disputes(principal)),
    )


@portal_view()
def dispute_detail(request: HttpRequest, principal: Principal, pk: int) -> HttpResponse:
    dispute = selectors.disputes(principal).filter(pk=pk).first()
    if dispute is None:
        raise Http404
    return page(request, "frontend/dispute.html", principal, "disputes", dispute=dispute)
