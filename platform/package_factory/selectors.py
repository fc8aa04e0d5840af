"""Reads: a tenant's package builds, the ONNX files its capabilities use, and the base fees their
measured cost suggests (in production, and in customer sandboxes)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import QuerySet

from accounts.access import Principal
from billing.costs import sandbox_call_cost, suggested_base_fee
from catalog.models import OnnxArtifact
from common.money import round_money
from common.periods import month_bounds

from .models import PackageBuild
from .quote import COST_PLACES


def package_builds(principal: Principal) -> QuerySet[PackageBuild]:
    builds = PackageBuild.objects.select_related("package", "capability", "tenant")
    return builds if principal.tenant is None else builds.filter(tenant=principal.tenant)


def artifact_of(principal: Principal, sha256: str) -> OnnxArtifact | None:
    """The file, if one of the principal's tenant's capabilities uses it (staff: any)."""
    artifacts = OnnxArtifact.objects.filter(sha256=sha256)
    if principal.tenant is not None:
        artifacts = artifacts.filter(capabilities__owner=principal.tenant)
    return artifacts.distinct().first()


def measured_base_fee(build: PackageBuild, month: str) -> Decimal:
    """The base fee the package's measured cost in `month` suggests (billing.costs.suggested_base_fee:
    its cost per contract that used it, × its margin factor), in the quote's currency; 0 without traffic.
    Beside the upload-time quote once the package serves, as the portal's build page shows it."""
    return suggested_base_fee(build.package, *month_bounds(month), currency=build.quote["currency"])


@dataclass(frozen=True)
class SandboxQuote:
    """The design's base fee from the capability's cost per event as sandboxes measured it: cost per
    event × the declared events a month × the margin factor."""

    calls: int
    cost_per_event: Decimal
    events_per_month: int
    margin_factor: Decimal
    base_fee: Decimal
    currency: str

    @property
    def formula(self) -> str:
        return (
            f"{self.cost_per_event} × {self.events_per_month} × {self.margin_factor} = {self.base_fee} "
            f"{self.currency}"
        )


def sandbox_base_fee(build: PackageBuild, start: datetime, end: datetime) -> SandboxQuote | None:
    """The base fee the package's calls in customer sandboxes over [start, end) suggest (on hosts with a
    cost profile), in the quote's currency; None before any was served there."""
    measured = sandbox_call_cost(build.package, start, end)
    if measured is None:
        return None
    quote = build.quote
    per_event = measured.cost / measured.calls
    events, margin = int(quote["events_per_month"]), Decimal(quote["margin_factor"])
    currency = quote["currency"]
    fee = round_money(per_event * events * margin, currency)
    return SandboxQuote(measured.calls, per_event.quantize(COST_PLACES), events, margin, fee, currency)
