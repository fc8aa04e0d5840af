"""The drill-down: from an invoice line to the records it bills, and from a record to its proof.

The record page carries what the browser needs to check the record's inclusion itself (the proof and
the signed checkpoint from /v1/ledger/records/<id>/inclusion, the platform's key): verify.js does it
with WebCrypto, step by step, so the customer need not take the server's word."""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.utils.translation import gettext as _

from accounts.access import Principal
from billing.drilldown import line_records, record_view
from ledger.selectors import checkpoint_keys, checkpoint_public_key

from .. import selectors
from ..access import portal_view
from .common import page


@portal_view()
def line_record_list(request: HttpRequest, principal: Principal, pk: int, line_pk: int) -> HttpResponse:
    invoice = selectors.invoice_detail(principal, pk)
    line = None if invoice is None else invoice.lines.filter(pk=line_pk).first()
    if invoice is None or line is None:
        raise Http404
    try:
        number = int(request.GET.get("page", "1"))
    except ValueError:
        number = 1
    listing = line_records(invoice, line, number)
    return page(request, "frontend/line_records.html", principal, "invoices", listing=listing)


@portal_view()
def record_detail(request: HttpRequest, principal: Principal, record_id: str) -> HttpResponse:
    view = record_view(str(record_id), principal.tenant_code)
    if view is None:
        raise Http404
    return page(
        request,
        "frontend/record.html",
        principal,
        "invoices",
        view=view,
        checkpoint_keys=checkpoint_keys(),
        verify={
            "inclusion_url": f"/v1/ledger/records/{record_id}/inclusion",
            "origin": settings.LEDGER_ORIGIN,
            "public_key": checkpoint_public_key().hex(),
        },
        verify_text={
            "path": _("Audit path"),
            "checkpoint": _("Checkpoint names this tree and root"),
            "key": _("Signed by the platform's key"),
            "signature": _("Signature verifies"),
            "error": _("Check failed"),
            "verified": _("Verified in your browser: this record is in the signed log."),
            "failed": _("Not verified: see the step that failed."),
        },
    )
