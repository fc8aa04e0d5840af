"""Inference API keys of the tenant's contracts: create (the secret is shown once), revoke."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect

from accounts.access import WRITE_DEVELOPER, Principal
from entitlements.services import EntitlementError, issue_api_key, revoke_api_key

from .. import selectors
from ..access import READ_WRITE, WRITE, portal_view
from ..forms import ApiKeyForm
from .common import error_message, is_htmx, page


def _keys_page(
    request: HttpRequest, principal: Principal, form: ApiKeyForm, status: int = 200, **extra: object
) -> HttpResponse:
    return page(
        request,
        "frontend/keys.html",
        principal,
        "keys",
        status=status,
        api_keys=selectors.api_keys(principal),
        form=form,
        can_write=principal.may_write(WRITE_DEVELOPER),
        **extra,
    )


@portal_view(WRITE_DEVELOPER, READ_WRITE)
def key_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    """GET: the keys. POST: issue one; this answer is the only one that ever holds its secret."""
    if request.method != "POST":
        return _keys_page(request, principal, ApiKeyForm(principal))
    form = ApiKeyForm(principal, request.POST)
    if not form.is_valid():
        return _keys_page(request, principal, form, status=400)
    data = form.cleaned_data
    try:
        issued = issue_api_key(
            contract_code=data["contract"],
            sla_class=data["sla_class"],
            quota_tokens=data["quota_tokens"],
            name=data["name"],
        )
    except EntitlementError as error:
        form.add_error(None, error_message(error))
        return _keys_page(request, principal, form, status=400)
    response = _keys_page(request, principal, ApiKeyForm(principal), issued=issued)
    response["Cache-Control"] = "no-store"
    return response


@portal_view(WRITE_DEVELOPER, WRITE)
def key_revoke(request: HttpRequest, principal: Principal, prefix: str) -> HttpResponse:
    api_key = selectors.api_keys(principal).filter(prefix=prefix).first()
    if api_key is None:
        raise Http404
    api_key = revoke_api_key(api_key.prefix)
    if is_htmx(request):
        return page(request, "frontend/partials/key_row.html", principal, "keys", key=api_key, can_write=True)
    return redirect("portal-keys")
