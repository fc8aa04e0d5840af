"""Gray releases in the portal: the tenant's release plans, each stage's report (resources used, SLA
attainment, the acceptance metric, staff notes) and its PDF in English or Chinese."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.translation import get_language

from accounts.access import Principal
from common.errors import ApiError
from releases.models import ReleasePlan, ReleaseStage
from releases.pdf import LANGUAGES, render_stage_pdf
from releases.selectors import stage_of, stage_report, visible_plans

from ..access import portal_view
from .common import page


@portal_view()
def plan_list(request: HttpRequest, principal: Principal) -> HttpResponse:
    return page(request, "frontend/releases.html", principal, "releases", plans=visible_plans(principal))


@portal_view()
def stage_detail(request: HttpRequest, principal: Principal, code: str, position: int) -> HttpResponse:
    plan, stage = _plan_stage(principal, code, position)
    report = stage_report(plan, stage, timezone.now())
    return page(request, "frontend/release_stage.html", principal, "releases", report=report)


@portal_view()
def stage_pdf(request: HttpRequest, principal: Principal, code: str, position: int) -> HttpResponse:
    """`?lang=en|zh-Hans`, else the page's language."""
    plan, stage = _plan_stage(principal, code, position)
    asked = request.GET.get("lang") or ("zh-Hans" if (get_language() or "").lower() == "zh-hans" else "en")
    language = asked if asked in LANGUAGES else "en"
    body = render_stage_pdf(stage_report(plan, stage, timezone.now()), language)
    response = HttpResponse(body, content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{plan.code}-stage-{position}-{language}.pdf"'
    return response


def _plan_stage(principal: Principal, code: str, position: int) -> tuple[ReleasePlan, ReleaseStage]:
    plan = visible_plans(principal).filter(code=code).first()
    if plan is None:
        raise Http404
    try:
        return plan, stage_of(plan, position)
    except ApiError:
        raise Http404 from None
