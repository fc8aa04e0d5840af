"""Billing errors carry a stable code for the API's {code, message, details} answer."""

from __future__ import annotations

from common.errors import ApiError


class BillingError(ApiError, ValueError):
    """A request billing cannot carry out; `code` is stable, `message` says why."""

    http_status = 409


class InvalidRequest(BillingError):
    """The request itself is malformed (HTTP 400)."""

    http_status = 400


class TermsError(InvalidRequest):
    """Contract terms that cannot be billed: negative prices, overlapping tiers, unknown dimensions…"""
