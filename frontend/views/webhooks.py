"""Webhook endpoints, their delivery log (every attempt), and replaying a delivery."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.translation import gettext as _

from accounts.access import WRITE_DEVELOPER, Principal
from common.errors import ApiError
from webhooks.services import create_endpoint, replay_delivery

from .. import selectors
from ..access import READ_WRITE, WRITE, portal_view
from ..forms import WebhookEndpointForm
from .common import error_message, is_htmx, page

DELIVERIES_SHOWN = 100


def _endpoints_page(
    request: HttpRequest, principal: Principal, form: WebhookEndpointForm, status: int = 200, **extra: object
) -> HttpResponse:
    return page(
        request,
        "frontend/webhooks.html",
        principal,
        "webhooks",
        status=status,
        endpoints=selectors.webhook_endpoints(principal),
        form=form,
        can_write=principal.may_write(WRITE_DEVELOPER),
        **extra,
    )


@portal_view(WRITE_DEVELOPER, READ_WRITE)
def endpoint_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    """GET: the endpoints. POST: add one; this answer is the only one that shows its signing secret."""
    if request.method != "POST":
        return _endpoints_page(request, principal, WebhookEndpointForm())
    form = WebhookEndpointForm(request.POST)
    if not form.is_valid():
        return _endpoints_page(request, principal, form, status=400)
    try:
        created = create_endpoint(
            principal, url=form.cleaned_data["url"], event_types=form.cleaned_data["event_types"]
        )
    except ApiError as error:
        form.add_error(None, error_message(error))
        return _endpoints_page(request, principal, form, status=400)
    response = _endpoints_page(request, principal, WebhookEndpointForm(), created=created)
    response["Cache-Control"] = "no-store"
    return response


@portal_view()
def endpoint_detail(request: HttpRequest, principal: Principal, pk: int) -> HttpResponse:
    endpoint = selectors.webhook_endpoints(principal).filter(pk=pk).first()
    if endpoint is None:
        raise Http404
    return page(
        request,
        "frontend/webhook.html",
        principal,
        "webhooks",
        endpoint=endpoint,
        deliveries=selectors.deliveries(principal).filter(endpoint=endpoint)[:DELIVERIES_SHOWN],
        can_replay=principal.may_write(WRITE_DEVELOPER),
    )


@portal_view(WRITE_DEVELOPER, WRITE)
def replay(request: HttpRequest, principal: Principal, pk: int) -> HttpResponse:
    """Send a delivery again (webhooks.services.replay_delivery); a new attempt joins its log."""
    delivery = selectors.deliveries(principal).filter(pk=pk).first()
    if delivery is None:
        raise Http404
    error = None
    try:
        replay_delivery(delivery)
    except ApiError as failure:
        error = error_message(failure)
    delivery = selectors.deliveries(principal).get(pk=pk)
    if is_htmx(request):
        row = "frontend/partials/delivery_row.html"
        return page(request, row, principal, "webhooks", delivery=delivery, can_replay=True, error=error)
    if error:
        messages.error(request, error)
    else:
        messages.success(request, _("The delivery was sent again."))
    return redirect("portal-webhook", pk=delivery.endpoint_id)
