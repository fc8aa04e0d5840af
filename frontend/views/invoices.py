"""Invoices with their lines, credit notes, paying them (Stripe Checkout), and disputes opened from a
line."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.translation import gettext_lazy

from accounts.access import WRITE_BILLING, Principal
from billing.checkout import start_invoice_checkout
from billing.disputes import open_dispute
from billing.models import SETTLED_DISPUTES, Dispute, Invoice, InvoiceLine
from billing.parties import BUYER_DETAIL_NAMES
from billing.selectors import charge_groups, tax_breakdown
from common.errors import ApiError
from ledger.selectors import LedgerLookupError
from pricing.dimensions import CHARGE_GROUP_NAMES

from .. import selectors
from ..access import READ_WRITE, WRITE, portal_view
from .common import error_message, is_htmx, page, paginate

DISPUTABLE = (Invoice.Status.FINALIZED, Invoice.Status.PAID)
PAYMENT_OUTCOMES = {
    "success": gettext_lazy(
        "Thank you. Stripe is confirming your payment: this page shows Paid once it has."
    ),
    "cancelled": gettext_lazy("Payment cancelled: nothing was charged."),
}


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
    may_write = principal.may_write(WRITE_BILLING) and not principal.is_staff
    return page(
        request,
        "frontend/invoice.html",
        principal,
        "invoices",
        invoice=invoice,
        lines=[(line, shown.get(line.pk)) for line in invoice.lines.all()],
        charge_groups=[(CHARGE_GROUP_NAMES[g.group], g) for g in charge_groups(invoice)],
        tax_rows=[(t, f"{(t.rate * 100).normalize():f} %") for t in tax_breakdown(invoice)]
        if invoice.terms.get("taxes")
        else [],
        disputable=invoice.status in DISPUTABLE,
        can_dispute=principal.may_write(WRITE_BILLING),
        party_cards=[
            (role, {**who, "missing_names": [BUYER_DETAIL_NAMES[n] for n in who.get("missing", [])]})
            for role in ("issuer", "buyer")
            if (who := invoice.parties.get(role)) is not None
        ],
        can_pay=may_write and invoice.payment_status in ("due", "overdue"),
        online_payment=bool(settings.STRIPE_API_KEY),
        payment_outcome=PAYMENT_OUTCOMES.get(request.GET.get("payment", "")),
    )


@portal_view(WRITE_BILLING, WRITE)
def pay_invoice(request: HttpRequest, principal: Principal, pk: int) -> HttpResponse:
    """Pay: to the Stripe Checkout page for the amount due, or back to the invoice with the reason."""
    invoice = selectors.invoice_detail(principal, pk)
    if invoice is None:
        raise Http404
    page_url = request.build_absolute_uri(reverse("portal-invoice", args=[pk]))
    try:
        return redirect(start_invoice_checkout(invoice, page_url))
    except ApiError as error:
        messages.error(request, error_message(error))
        return redirect("portal-invoice", pk=pk)


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
