"""Reads for the portal, every one scoped to the principal's tenant (staff: every tenant).

An object of another tenant is simply not in these querysets, so a view that looks it up answers 404.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from accounts.access import Principal, scoped
from billing.models import Dispute, Invoice, Note
from billing.quotas import Quota
from billing.quotas import quotas as contract_quotas
from billing.selectors import period_usage
from common.periods import month_bounds, month_of
from contracts.models import Contract, prices_in_effect
from entitlements.models import ApiKey, QuotaPeriod
from sla.models import CustomerDependency, Exclusion, SlaReport
from sla.selectors import DependencyStatus, dependency_statuses
from webhooks.models import WebhookDelivery, WebhookEndpoint


def contracts(principal: Principal) -> QuerySet[Contract]:
    return scoped(Contract.objects.production().select_related("tenant", "package"), principal)


def invoices(principal: Principal) -> QuerySet[Invoice]:
    rows = Invoice.objects.select_related("tenant", "contract", "contract__package")
    return scoped(rows, principal)


def invoice_detail(principal: Principal, pk: int) -> Invoice | None:
    return invoices(principal).prefetch_related("lines", "notes", "disputes").filter(pk=pk).first()


def notes(principal: Principal) -> QuerySet[Note]:
    rows = Note.objects.select_related("invoice", "invoice__tenant", "line")
    return scoped(rows, principal, "invoice__tenant")


def disputes(principal: Principal) -> QuerySet[Dispute]:
    rows = Dispute.objects.select_related("tenant", "invoice", "line", "credit_note")
    return scoped(rows.prefetch_related("events__actor"), principal)


def sla_reports(principal: Principal) -> QuerySet[SlaReport]:
    rows = SlaReport.objects.select_related("contract", "contract__tenant", "contract__package")
    return scoped(rows.order_by("-month", "contract__code"), principal, "contract__tenant")


def dependencies(principal: Principal) -> list[DependencyStatus]:
    """The tenant's watched dependencies, each with its state."""
    return dependency_statuses(scoped(CustomerDependency.objects.all(), principal, "contract__tenant"))


def outages(principal: Principal) -> QuerySet[Exclusion]:
    """The exclusions the dependency watch opened on the tenant's contracts, newest first, with appeals."""
    rows = Exclusion.objects.filter(detected_by__isnull=False).select_related("contract", "detected_by")
    rows = rows.prefetch_related("appeals").order_by("-starts_at", "-id")
    return scoped(rows, principal, "contract__tenant")


def api_keys(principal: Principal) -> QuerySet[ApiKey]:
    rows = ApiKey.objects.select_related("contract", "tenant").order_by("-created_at", "prefix")
    return scoped(rows, principal)


def webhook_endpoints(principal: Principal) -> QuerySet[WebhookEndpoint]:
    """A customer sees its own endpoints; platform-wide endpoints (no tenant) are staff-only."""
    rows = WebhookEndpoint.objects.select_related("tenant").annotate(
        failed=Count("deliveries", filter=Q(deliveries__status=WebhookDelivery.Status.FAILED))
    )
    return scoped(rows, principal)


def deliveries(principal: Principal) -> QuerySet[WebhookDelivery]:
    rows = WebhookDelivery.objects.select_related("event", "endpoint").prefetch_related("attempts")
    return scoped(rows, principal, "endpoint__tenant")


def current_period(now: datetime | None = None) -> tuple[datetime, datetime]:
    return month_bounds(month_of(now or timezone.now()))


def quotas(contract: Contract, start: datetime, end: datetime, now: datetime | None = None) -> list[Quota]:
    """The contract's quotas (`ContractPrice.included_quantity` > 0 of the price version in effect
    `now`) against its usage in [start, end), measured by the same ClickHouse query that rates
    invoices (billing.quotas computes them; a dimension not measured from records shows 0 used)."""
    now = now or timezone.now()
    if not any(p.included_quantity > 0 for p in prices_in_effect(contract.prices.all(), now)):
        return []
    metrics = {m.code: m.expression for m in contract.metrics.all()}
    usage = period_usage(contract.tenant.code, contract.code, start, end, metrics)
    return [
        quota if quota.used is not None else replace(quota, used=Decimal(0), left=quota.included)
        for quota in contract_quotas(contract, usage, now)
        if quota.included > 0
    ]


@dataclass(frozen=True)
class KeyQuota:
    """An API key's monthly token quota: tokens used this month (leases still held count in full, as
    the quota leases do) and what is left. A key without a quota takes no leases, so its tokens are
    not counted one by one: `used` and `left` are None (the contract's total is `contract_tokens`)."""

    api_key: ApiKey
    used: int | None
    left: int | None


def key_quotas(keys: QuerySet[ApiKey], month: str) -> list[KeyQuota]:
    periods = {p.api_key_id: p for p in QuotaPeriod.objects.filter(api_key__in=keys, period=month)}
    rows = []
    for key in keys:
        if key.quota_tokens is None:
            rows.append(KeyQuota(key, None, None))
            continue
        period = periods.get(key.pk)
        used = period.settled_tokens + period.outstanding_tokens if period else 0
        rows.append(KeyQuota(key, used, max(key.quota_tokens - used, 0)))
    return rows


def contract_tokens(contract: Contract, start: datetime, end: datetime) -> Decimal:
    """Input plus output tokens the contract's billable requests used in [start, end), every key together,
    from the same query that rates invoices."""
    usage = period_usage(contract.tenant.code, contract.code, start, end, {})
    return usage.quantities.get("tokens_in", Decimal(0)) + usage.quantities.get("tokens_out", Decimal(0))
