"""The tenant's sandbox in the portal: open it on a combination of packages, its three core figures and
daily volume, the projected invoice of the packages chosen (a preview), a key per package, the simulated
traffic, and the reset (sandbox.services, sandbox.selectors; as `/v1/sandbox`)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.access import WRITE_ANY, Principal
from catalog.selectors import active_packages
from common.errors import ApiError
from sandbox.errors import SandboxError, SandboxNotFound
from sandbox.selectors import projected_invoice, sandbox_metrics, sandbox_of
from sandbox.services import issue_sandbox_key, open_sandbox, reset_sandbox, set_daily_events

from ..access import READ_WRITE, portal_view
from .common import error_message, page
from .usage import ECHARTS, charts_available


@portal_view(WRITE_ANY, READ_WRITE)
def sandbox_page(request: HttpRequest, principal: Principal) -> HttpResponse:
    status = 200
    issued = None
    if request.method == "POST":
        try:
            issued = _act(request, principal)
        except ApiError as error:
            messages.error(request, error_message(error))
            status = 400
        else:
            if issued is None:
                return redirect("portal-sandbox")
    try:
        box = sandbox_of(principal)
    except SandboxNotFound:
        offered = [(p.code, p.name) for p in active_packages(principal) if p.plans.all()]
        return page(request, "frontend/sandbox.html", principal, "sandbox", status=status, offered=offered)
    now = timezone.now()
    metrics = sandbox_metrics(box, now)
    held = [p.code for p in box.contract.held_packages()]
    chosen = [code for code in request.GET.getlist("package") if code in held] or held
    return page(
        request,
        "frontend/sandbox.html",
        principal,
        "sandbox",
        status=status,
        sandbox=box,
        held=held,
        chosen=chosen,
        metrics=metrics,
        projection=projected_invoice(box, chosen, now),
        issued=issued,
        chart=[[day.isoformat(), n] for day, n in metrics.daily],
        charts_available=charts_available(),
        echarts=ECHARTS,
        can_write=principal.may_write(WRITE_ANY) and not principal.is_staff,
    )


def _act(request: HttpRequest, principal: Principal) -> str | None:
    """Do the form's action; the new key's secret when one was issued (shown once), else None."""
    action = request.POST.get("action", "")
    if action == "open":
        open_sandbox(principal, request.POST.getlist("package"), _daily_events(request, "1000"))
        messages.success(request, _("The sandbox is open."))
        return None
    box = sandbox_of(principal)
    if action == "key":
        return issue_sandbox_key(box, request.POST.get("package", ""), _("sandbox (portal)")).secret
    if action == "traffic":
        set_daily_events(box, _daily_events(request, ""))
        messages.success(request, _("The simulated traffic is changed."))
        return None
    if action == "reset":
        reset_sandbox(box)
        messages.success(request, _("The sandbox's records are deleted."))
        return None
    raise SandboxError("unknown_action", _("Unknown action."))


def _daily_events(request: HttpRequest, default: str) -> int:
    """The form's events a day; -1 for what is not a whole number, which the service refuses by name."""
    daily = request.POST.get("daily_events", default).strip()
    return int(daily) if daily.isdigit() else -1
