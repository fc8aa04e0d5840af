"""Writes: API tokens for programs."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import timezone

from common.errors import ApiError

from .access import Principal, scoped
from .models import ApiToken, Role, new_token_secret, token_digest


class TokenError(ApiError):
    http_status = 400


class TokenNotFound(ApiError):
    http_status = 404


@dataclass(frozen=True)
class IssuedToken:
    token: ApiToken
    secret: str  # shown once


def issue_api_token(principal: Principal, *, role: str, name: str = "") -> IssuedToken:
    """A new token for the principal's tenant (the view admits owners only)."""
    if principal.tenant is None or principal.user_id is None:
        raise TokenError("tenant_required", "API tokens belong to a tenant; staff users cannot make them.")
    if role not in Role.values:
        raise TokenError("unknown_role", f"Role must be one of {', '.join(Role.values)}.")
    if principal.token_id is not None:
        raise TokenError("token_cannot_issue", "Sign in to make API tokens; a token cannot make another.")
    secret = new_token_secret()
    token = ApiToken.objects.create(
        tenant=principal.tenant,
        role=role,
        name=name,
        prefix=secret[:12],
        digest=token_digest(secret),
        created_by_id=principal.user_id,
    )
    return IssuedToken(token=token, secret=secret)


def revoke_api_token(principal: Principal, prefix: str) -> ApiToken:
    """Revoke one of the tenant's tokens; revoking twice answers the first revocation."""
    token = scoped(ApiToken.objects.filter(prefix=prefix), principal).first()
    if token is None:
        raise TokenNotFound("token_not_found", "No such API token.", {"prefix": prefix})
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token
