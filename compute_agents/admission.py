"""Admission (L1): who is asking (key → entitlement), whether the request may run (its format, the rules
file), which path it takes (the policy table), and the quota it holds while it runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .engine import Engine
from .entitlements import Entitlement, EntitlementStore, Quota, Reservation
from .leases import LeaseUnavailable
from .router import RequestRefused, Rules
from .spool import Spool
from .wire import ApiError, parse_request


@dataclass(frozen=True)
class Admitted:
    prompt: str
    max_tokens: int
    tokens_in: int
    path: tuple[str, ...]
    reservation: Reservation


class Admission:
    def __init__(
        self, engine: Engine, spool: Spool, entitlements: EntitlementStore, rules: Rules, quota: Quota
    ) -> None:
        self.engine = engine
        self.spool = spool
        self.entitlements = entitlements
        self.rules = rules
        self.quota = quota

    def authenticate(self, authorization: str | None) -> Entitlement:
        """The key's entitlement; refused (no record) when the agent cannot serve or the key may not."""
        if self.spool.full():
            raise ApiError(503, "server_error", "spool_full", self.spool.full_message())
        if self.entitlements.stale():
            raise ApiError(503, "server_error", "entitlements_stale", "The agent cannot reach the platform.")
        scheme, _, token = (authorization or "").partition(" ")
        entitlement = self.entitlements.lookup(token.strip()) if scheme.lower() == "bearer" else None
        if entitlement is None:
            raise ApiError(401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
        if entitlement.status != "active":
            raise ApiError(
                403, "invalid_request_error", "api_key_" + entitlement.status, "This API key may not be used."
            )
        return entitlement

    def admit(self, route: str, entitlement: Entitlement, body: Any, now_ns: int) -> Admitted:
        """Parse, rules, path, quota reservation; a refusal raises ApiError (the caller records it)."""
        request = parse_request(route, body)
        given = request.prompt
        prompt = given if isinstance(given, str) else self.engine.chat_prompt(given)
        try:
            self.rules.check(route, body)
        except RequestRefused as refused:
            raise ApiError(
                400, "invalid_request_error", "rule_violation", str(refused), refused.param
            ) from None
        path = self.rules.path_for(entitlement.package, entitlement.sla_class)
        tokens_in = self.engine.count_tokens(prompt)
        reservation = self._reserve(entitlement, tokens_in + request.max_tokens, now_ns)
        return Admitted(prompt, request.max_tokens, tokens_in, path, reservation)

    def _reserve(self, entitlement: Entitlement, tokens: int, now_ns: int) -> Reservation:
        try:
            reservation = self.quota.reserve(entitlement, tokens, now_ns)
        except LeaseUnavailable:
            raise ApiError(
                503,
                "server_error",
                "quota_lease_unavailable",
                "The agent holds no quota for this key and cannot reach the platform for more.",
            ) from None
        if reservation is None:
            raise ApiError(
                429,
                "insufficient_quota",
                "insufficient_quota",
                "This API key's monthly token quota is used up.",
            )
        return reservation
