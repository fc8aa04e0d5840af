"""Who may read which tenant's SLA data: the same membership the ledger and billing APIs use.

Staff read every tenant; a customer user reads the tenant of their `ledger.TenantMembership`.
"""

from __future__ import annotations

from typing import Any

from ledger.models import TenantMembership


def visible_tenant_ids(user: Any) -> list[int] | None:
    """None means every tenant (staff); otherwise the ids of the user's tenants (maybe none)."""
    if not user.is_authenticated:
        return []
    if getattr(user, "is_staff", False):
        return None
    return list(TenantMembership.objects.filter(user=user).values_list("tenant_id", flat=True))
