"""Reads for contracts: the ones a caller may see. Their quotas against this period's usage are
measured by billing (billing.quotas)."""

from __future__ import annotations

from django.db.models import QuerySet

from accounts.access import Principal, scoped

from .models import Contract


def visible_contracts(principal: Principal) -> QuerySet[Contract]:
    """The contracts the principal sees (not a sandbox's: its page is the sandbox's), with what their
    quotas need."""
    contracts = (
        Contract.objects.production()
        .select_related("tenant", "package", "plan")
        .prefetch_related("prices", "metrics")
    )
    return scoped(contracts, principal)
