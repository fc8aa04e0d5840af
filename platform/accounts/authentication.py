"""`Authorization: Bearer tmt_…`: a program's API token, scoped to one tenant and one role."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from .models import TOKEN_PREFIX, ApiToken, token_digest
from .token_cache import token_by_digest, touch


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = request.headers.get("Authorization", "")
        scheme, _, secret = header.partition(" ")
        if scheme != self.keyword or not secret.strip().startswith(TOKEN_PREFIX):
            return None
        token = token_by_digest(token_digest(secret.strip()))
        if token is None or token.revoked_at is not None:
            raise exceptions.AuthenticationFailed("Unknown or revoked API token.", code="invalid_token")
        if token.created_by.is_staff:
            # A token is a tenant's credential; it must never carry platform-staff powers.
            raise exceptions.AuthenticationFailed(
                "Tokens made by staff users are void.", code="invalid_token"
            )
        now = timezone.now()
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
            touch(token, now)
        return token.created_by, token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword
