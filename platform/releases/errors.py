"""The release plans' refusals, each with a stable code."""

from __future__ import annotations

from common.errors import ApiError


class ReleaseError(ApiError):
    """A plan that cannot be made as asked (HTTP 400): `details` names the field."""

    http_status = 400


class ReleaseNotFound(ApiError):
    """No such plan or stage among those the caller sees (HTTP 404)."""

    http_status = 404

    def __init__(self, what: str) -> None:
        super().__init__("not_found", f"No such {what}.")


class ReleaseConflict(ApiError):
    """A promotion the plan's state refuses: its gate does not hold, it is automatic, it is complete,
    or the package already has a plan in force (HTTP 409)."""

    http_status = 409
