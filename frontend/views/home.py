"""Sign in, sign out, and the overview page a customer lands on."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.templatetags.static import static
from django.views.decorators.http import require_GET

from accounts.access import Principal
from billing.models import Dispute, Invoice
from contracts.models import Contract

from .. import selectors
from ..access import portal_view
from .common import page


class LoginView(auth_views.LoginView):
    template_name = "frontend/login.html"
    redirect_authenticated_user = True


class LogoutView(auth_views.LogoutView):
    next_page = "portal-login"


@portal_view()
def home(request: HttpRequest, principal: Principal) -> HttpResponse:
    contracts = selectors.contracts(principal)
    invoices = selectors.invoices(principal)
    return page(
        request,
        "frontend/home.html",
        principal,
        "home",
        active_contracts=contracts.filter(status=Contract.Status.ACTIVE).count(),
        unpaid_invoices=invoices.filter(status=Invoice.Status.FINALIZED).count(),
        open_disputes=selectors.disputes(principal).filter(status=Dispute.Status.OPEN).count(),
        recent_invoices=invoices[:5],
    )


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico on every page that names none (the admin, the API docs)."""
    return redirect(static("frontend/favicon.svg"), permanent=True)
