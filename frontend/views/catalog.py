"""The package catalogue and buying a plan of a package (billing.purchases.purchase_package)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.translation import gettext as _

from accounts.access import WRITE_BILLING, Principal
from billing.purchases import purchase_package
from catalog.selectors import active_packages
from common.errors import ApiError

from ..access import WRITE, portal_view
from .common import error_message, page


@portal_view()
def packages(request: HttpRequest, principal: Principal) -> HttpResponse:
    return page(
        request,
        "frontend/packages.html",
        principal,
        "packages",
        packages=active_packages(),
        can_buy=principal.may_write(WRITE_BILLING) and not principal.is_staff,
    )


@portal_view(WRITE_BILLING, WRITE)
def buy(request: HttpRequest, principal: Principal) -> HttpResponse:
    """Buy a plan: Stripe Checkout plans go to the session's URL, invoiced ones to the new contract."""
    package_code, plan_code = request.POST.get("package", ""), request.POST.get("plan", "")
    try:
        purchase = purchase_package(principal, package_code, plan_code)
    except ApiError as error:
        messages.error(request, error_message(error))
        return redirect("portal-packages")
    if purchase.checkout_url:
        return redirect(purchase.checkout_url)
    messages.success(request, _("Contract %(code)s is active.") % {"code": purchase.contract.code})
    return redirect("portal-contract", code=purchase.contract.code)
