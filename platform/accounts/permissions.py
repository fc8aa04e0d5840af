"""The default DRF permission: any member reads its tenant; writes need one of the view's `write_roles`."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from .access import WRITE_OWNER, principal_of


class TenantRolePermission(BasePermission):
    message = "Your role may not do this."
    code = "forbidden_role"

    def has_permission(self, request: Request, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        principal = principal_of(request)
        if request.method in SAFE_METHODS:
            return True
        return principal.may_write(tuple(getattr(view, "write_roles", WRITE_OWNER)))
