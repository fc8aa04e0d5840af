"""The low-code package factory in the portal: pick an industry template, upload an ONNX model, change
the declared terms, and get the package, its quote and its deployment manifests
(package_factory.services.build_package, as `POST /v1/factory/packages`)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.utils.translation import get_language
from django.utils.translation import gettext as _

from accounts.access import WRITE_ANY, Principal
from catalog.models import HostCostProfile
from common.errors import ApiError
from common.periods import month_of, previous_month
from package_factory.errors import FactoryError
from package_factory.selectors import measured_base_fee, package_builds, sandbox_base_fee
from package_factory.services import build_package
from package_factory.templates import Template, template, templates

from ..access import READ_WRITE, portal_view
from .common import error_message, page

DEFAULT_TEMPLATE = "contract-review"
SANDBOX_WINDOW = timedelta(days=30)  # the sandbox calls whose cost the build page quotes from


def form_values(chosen: Template) -> dict[str, str]:
    """The form's fields as the template fills them (the codes are the customer's to choose)."""
    spec = chosen.spec
    values = {
        "package_name": spec["package"]["name"],
        "unit": spec["package"]["unit"],
        "capability_name": spec["capability"]["name"],
        "inputs": json.dumps(spec["capability"]["inputs"]),
        "outputs": json.dumps(spec["capability"]["outputs"]),
        "acceptance_rule": spec["capability"].get("acceptance_rule", ""),
    }
    values |= {key: str(value) for key, value in spec["sla"].items()}
    values |= {key: str(value) for key, value in spec["prices"].items()}
    return values


def _tensors(text: str, field: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise FactoryError(
            "invalid_spec", _("%(field)s is not a JSON list of tensors.") % {"field": field}, {"field": field}
        ) from None


def _number(text: str) -> int | str:
    return int(text) if text.strip().isdigit() else text


def declaration_from(form: dict[str, str]) -> dict[str, Any]:
    """The form's fields as the API's declaration (a blank base fee takes the factory's proposal)."""
    sla = {key: _number(form.get(key, "")) for key in ("timeout_ms", "p99_ms")}
    sla["availability_percent"] = form.get("availability_percent", "")
    prices: dict[str, Any] = {
        "currency": form.get("currency", ""),
        "per_event": form.get("per_event", ""),
        "included_events": _number(form.get("included_events", "") or "0"),
        "events_per_month": _number(form.get("events_per_month", "")),
        "margin_factor": form.get("margin_factor", ""),
    }
    if form.get("base_fee", "").strip():
        prices["base_fee"] = form["base_fee"].strip()
    return {
        "package": {
            "code": form.get("package_code", ""),
            "name": form.get("package_name", ""),
            "unit": form.get("unit", ""),
        },
        "capability": {
            "code": form.get("capability_code", ""),
            "name": form.get("capability_name", ""),
            "inputs": _tensors(form.get("inputs", ""), "capability.inputs"),
            "outputs": _tensors(form.get("outputs", ""), "capability.outputs"),
            "acceptance_rule": form.get("acceptance_rule", ""),
        },
        "sla": sla,
        "prices": prices,
        "host_class": form.get("host_class", ""),
    }


@portal_view(WRITE_ANY, READ_WRITE)
def factory(request: HttpRequest, principal: Principal) -> HttpResponse:
    source = request.POST if request.method == "POST" else request.GET
    try:
        chosen = template(source.get("template") or DEFAULT_TEMPLATE)
    except FactoryError:
        chosen = template(DEFAULT_TEMPLATE)
    values = form_values(chosen)
    status = 200
    if request.method == "POST":
        values = {key: request.POST.get(key, "") for key in request.POST if key != "csrfmiddlewaretoken"}
        upload = request.FILES.get("model")
        try:
            if upload is None:
                raise FactoryError("model_required", _("Choose the ONNX model file to upload."), {})
            build = build_package(
                principal, declaration_from(values), upload.read(), template_code=chosen.code
            )
        except ApiError as error:
            messages.error(request, error_message(error))
            status = 400
        else:
            messages.success(request, _("Package %(code)s is built.") % {"code": build.package.code})
            return redirect("portal-factory-build", code=build.package.code)
    language = get_language() or "en"
    return page(
        request,
        "frontend/factory.html",
        principal,
        "factory",
        status=status,
        templates=[(t.code, t.name_in(language), t.description_in(language)) for t in templates()],
        chosen=chosen,
        chosen_name=chosen.name_in(language),
        values=values,
        host_classes=list(HostCostProfile.objects.values_list("host_class", flat=True)),
        builds=package_builds(principal)[:50],
        can_build=principal.may_write(WRITE_ANY) and not principal.is_staff,
    )


@portal_view()
def factory_build(request: HttpRequest, principal: Principal, code: str) -> HttpResponse:
    build = package_builds(principal).filter(package__code=code).first()
    if build is None:
        raise Http404(_("No such package build."))
    plan = build.package.plans.prefetch_related("prices").first()
    now = timezone.now()
    last_month = previous_month(month_of(now))
    return page(
        request,
        "frontend/factory_build.html",
        principal,
        "factory",
        build=build,
        plan=plan,
        quote=build.quote,
        executor_config=json.dumps(build.executor_config, indent=2),
        last_month=last_month,
        measured_fee=measured_base_fee(build, last_month),
        sandbox_fee=sandbox_base_fee(build, now - SANDBOX_WINDOW, now),
        sandbox_days=SANDBOX_WINDOW.days,
    )
