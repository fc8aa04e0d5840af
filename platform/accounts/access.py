"""Who is asking: the tenant and role a request acts for, from a signed-in user or an API token.

Platform staff (a signed-in `is_staff` user) act for every tenant. A customer user acts for the tenant
of their `Membership`, in its role. An API token acts for its own tenant, in its role, whoever made it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from django.db.models import Model, QuerySet

from common.errors import ApiError

from .models import ApiToken, Membership, Role, Tenant

STAFF = "staff"
M = TypeVar("M", bound=Model)


class NoTenant(ApiError):
    http_status = 403


@dataclass(frozen=True)
class Principal:
    tenant: Tenant | None  # None: platform staff, every tenant
    role: str  # a Role value, or STAFF
    user_id: int | None
    token_id: int | None = None

    @property
    def is_staff(self) -> bool:
        return self.tenant is None

    @property
    def tenant_code(self) -> str | None:
        """The tenant code to filter by; None means every tenant (staff)."""
        return None if self.tenant is None else self.tenant.code

    @property
    def tenant_id(self) -> int | None:
        return None if self.tenant is None else self.tenant.pk

    def may_write(self, roles: tuple[str, ...]) -> bool:
        return self.is_staff or self.role in roles

    def sees_tenant(self, tenant_id: int | None) -> bool:
        return self.is_staff or (tenant_id is not None and tenant_id == self.tenant_id)


def principal_of(request: Any) -> Principal:
    """The principal of a Django or DRF request (cached on it); NoTenant (403) for a user of no tenant."""
    cached = getattr(request, "_treemeter_principal", None)
    if cached is not None:
        return cached
    principal = _resolve(request)
    request._treemeter_principal = principal
    return principal


def _resolve(request: Any) -> Principal:
    auth = getattr(request, "auth", None)
    if isinstance(auth, ApiToken):
        return Principal(tenant=auth.tenant, role=auth.role, user_id=auth.created_by_id, token_id=auth.pk)
    user = request.user
    if not user.is_authenticated:
        raise NoTenant("not_authenticated", "Sign in or send an API token.")
    if user.is_staff:
        return Principal(tenant=None, role=STAFF, user_id=user.pk)
    membership = Membership.objects.select_related("tenant").filter(user_id=user.pk).first()
    if membership is None:
        raise NoTenant("no_tenant", "This user acts for no tenant.")
    return Principal(tenant=membership.tenant, role=membership.role, user_id=user.pk)


PLATFORM = Principal(tenant=None, role=STAFF, user_id=None)
"""The platform acting for itself (management commands, tasks): like staff, it sees every tenant."""


def scoped(rows: QuerySet[M], principal: Principal, tenant: str = "tenant") -> QuerySet[M]:
    """The one way a read of the ORM is narrowed to its caller: staff see every row, anyone else the rows
    whose `tenant` lookup (the path to their Tenant, e.g. "contract__tenant") is their own tenant.

    Stores that carry the tenant's code rather than a foreign key (ClickHouse records, the ledger's
    leaves) narrow by `principal.tenant_code`, None meaning every tenant: `usage.selectors.scoped_filter`
    and `ledger.selectors.inclusion_proof`."""
    return rows if principal.is_staff else rows.filter(**{tenant: principal.tenant_id})


WRITE_ANY = (Role.OWNER, Role.BILLING, Role.DEVELOPER)
WRITE_BILLING = (Role.OWNER, Role.BILLING)
WRITE_DEVELOPER = (Role.OWNER, Role.DEVELOPER)
WRITE_OWNER = (Role.OWNER,)
