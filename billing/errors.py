"""Billing errors carry a stable code for the API's {code, message, details} answer."""

from __future__ import annotations

from typing import Any


class BillingError(ValueError):
    """A request billing cannot carry out; `code` is stable, `message` says why."""

    http_status = 409

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}


class InvalidRequest(BillingError):
    """The request itself is malformed (HTTP 400)."""

    http_status = 400


class TermsError(InvalidRequest):
    """Contract terms that cannot be billed: negative prices, overlapping tiers, unknown dimensions…"""
