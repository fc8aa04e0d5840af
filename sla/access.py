"""Who may read which tenant's SLA data.

Until the portal issue brings per-tenant API tokens and roles, a signed-in user reads a tenant's
SLA reports when they are staff, or a member of the Django group named `tenant:<tenant code>`.
"""

from __future__ import annotations

from typing import Any

from accounts.models import Tenant

TENANT_GROUP_PREFIX = "tenant:"


def visible_tenant_ids(user: Any) -> list[int] | None:
    """None means every tenant (staff); otherwise the ids of the user's tenants (maybe none)."""
    if not user.is_authenticated:
        return []
    if getattr(user, "is_staff", False):
        return None
    groups = user.groups.values_list("name", flat=True)
    codes = [
        name.removeprefix(TENANT_GROUP_PREFIX) for name in groups if name.startswith(TENANT_GROUP_PREFIX)
    ]
    return list(Tenant.objects.filter(code__in=codes).values_list("id", flat=True))
