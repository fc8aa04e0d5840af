"""The factory's refusals: each names what is wrong with the upload or the declaration."""

from __future__ import annotations

from common.errors import ApiError


class FactoryError(ApiError):
    """A model or a declaration the factory cannot build a package from (HTTP 400)."""

    http_status = 400


class ModelTooLarge(FactoryError):
    http_status = 413


class PackageExists(FactoryError):
    """A package or capability code already taken: nothing is created (HTTP 409)."""

    http_status = 409
