"""Reads for contracts: the ones a caller may see. Their quotas against this period's usage are
measured by billing (billing.quotas)."""

from __future__ import annotations

from django.db.models import QuerySet

from .models import Contract


def visible_contracts(tenant_id: int | None) -> QuerySet[Contract]:
    """Every contract for staff (None), else the tenant's own, with what their quotas need."""
    contracts = Contract.objects.select_related("tenant", "package", "plan").prefetch_related(
        "prices", "metrics"
    )
    return contracts if tenant_id is None else contracts.filter(tenant_id=tenant_id)
