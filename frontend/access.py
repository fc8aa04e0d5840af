"""Who a portal page acts for, and who may press its buttons.

Every portal view is wrapped in `portal_view`: it requires a signed-in user (anyone else is sent to
sign in), answers 405 to a method the view does not take, resolves the principal (accounts.access)
once and passes it to the view. Reads are open to every member of the tenant; a POST needs one of the
view's write roles (the same WRITE_* tuples as the REST API), else 403.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import render
from django.utils.translation import gettext as _

from accounts.access import NoTenant, principal_of

PortalView = Callable[..., HttpResponse]
READ = ("GET", "HEAD")
READ_WRITE = ("GET", "HEAD", "POST")
WRITE = ("POST",)


def forbidden(request: HttpRequest, message: str) -> HttpResponse:
    return render(request, "frontend/forbidden.html", {"message": message}, status=403)


def portal_view(
    write_roles: tuple[str, ...] = (), methods: tuple[str, ...] = READ
) -> Callable[[PortalView], Callable[..., HttpResponse]]:
    """Sign-in required; the view gets `(request, principal, ...)`. POST needs one of `write_roles`."""

    def decorate(view: PortalView) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if request.method not in methods:
                return HttpResponseNotAllowed(methods)
            try:
                principal = principal_of(request)
            except NoTenant:
                return forbidden(request, _("Your account does not belong to any customer."))
            if request.method == "POST" and not principal.may_write(write_roles):
                return forbidden(request, _("Your role may only read this page."))
            return view(request, principal, *args, **kwargs)

        return wrapped

    return decorate
