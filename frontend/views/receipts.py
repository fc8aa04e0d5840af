"""A receipt the customer kept (treemeter_records.receipts), checked against the log in the portal:
pasted or uploaded, it shows the receipt's claims, the record and its inclusion proof when logged, and,
when the record is missing after the grace period, the button that opens a dispute with it."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from accounts.access import WRITE_BILLING, Principal
from accounts.models import Role
from billing.disputes import open_receipt_dispute
from ledger.receipts import check_receipt
from ledger.selectors import LedgerLookupError
from treemeter_records.receipts import RECEIPT_MAX_CHARS

from ..access import READ_WRITE, WRITE, portal_view
from .common import error_message, page

TEMPLATE = "frontend/receipt.html"


def _token(request: HttpRequest) -> str:
    """The pasted receipt, else the uploaded file's first bytes (a receipt is far shorter)."""
    pasted = request.POST.get("receipt", "")
    upload = request.FILES.get("receipt_file")
    if pasted.strip() or upload is None:
        return pasted
    return upload.read(RECEIPT_MAX_CHARS + 1).decode("utf-8", errors="replace")


def _refused(
    request: HttpRequest, principal: Principal, token: str, error: LedgerLookupError
) -> HttpResponse:
    """The form again, with the token and the service's message, under its HTTP status."""
    return page(
        request, TEMPLATE, principal, "disputes", status=error.status, token=token, error=error_message(error)
    )


@portal_view(tuple(Role), READ_WRITE)  # checking is a read sent as a POST: every role may
def receipt_check(request: HttpRequest, principal: Principal) -> HttpResponse:
    if request.method != "POST":
        return page(request, TEMPLATE, principal, "disputes", token="")
    token = _token(request).strip()
    try:
        check = check_receipt(token, principal.tenant_code)
    except LedgerLookupError as error:
        return _refused(request, principal, token, error)
    may_dispute = check.is_evidence and principal.may_write(WRITE_BILLING)
    return page(request, TEMPLATE, principal, "disputes", token=token, check=check, may_dispute=may_dispute)


@portal_view(WRITE_BILLING, WRITE)
def receipt_dispute(request: HttpRequest, principal: Principal) -> HttpResponse:
    token = request.POST.get("receipt", "").strip()
    try:
        dispute = open_receipt_dispute(request.user, token, principal)
    except LedgerLookupError as error:
        return _refused(request, principal, token, error)
    return redirect("portal-dispute", pk=dispute.pk)
