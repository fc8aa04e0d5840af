"""The sandbox's refusals, each with its code."""

from __future__ import annotations

from common.errors import ApiError


class SandboxError(ApiError):
    """A request the sandbox cannot take (HTTP 400)."""


class SandboxNotFound(SandboxError):
    """The tenant has no sandbox open (HTTP 404)."""

    http_status = 404


class SandboxExists(SandboxError):
    """The tenant's sandbox is open already (HTTP 409): reset it, or change its traffic."""

    http_status = 409
