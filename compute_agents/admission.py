"""Admission (L1): who is asking (key → entitlement), whether the request may run (its format, the rules
file, the model it names, the model's context, the gray release of its package), which path it takes
(the policy table), and the quota it holds while it runs. Every check is before the forward pass."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .engine import Engine
from .entitlements import Entitlement, EntitlementStore, Quota, Reservation
from .leases import LeaseUnavailable
from .params import CompletionRequest, parse_request
from .releases import HourlyCalls
from .router import RequestRefused, Rules
from .spool import Spool
from .wire import ApiError


@dataclass(frozen=True)
class Admitted:
    request: CompletionRequest
    prompt: str
    tokens_in: int
    path: tuple[str, ...]
    reservation: Reservation


def model_not_found(model: str) -> ApiError:
    return ApiError(
        404,
        "invalid_request_error",
        "model_not_found",
        f"The model `{model}` does not exist or you do not have access to it.",
        "model",
    )


def seconds_to_next_month(now_ns: int) -> int:
    """How long until a monthly quota starts again (UTC months, as ``quota_period``)."""
    now = datetime.fromtimestamp(now_ns / 1e9, UTC)
    following = datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=UTC)
    return max(1, int(following.timestamp() - now_ns / 1e9))


def authenticate(spool: Spool, entitlements: EntitlementStore, authorization: str | None) -> Entitlement:
    """The active entitlement of the request's bearer key, from the signed snapshot; refused (no record)
    when this process cannot record what it serves (a full spool), the snapshot is stale, or the key is
    unknown or not active. The agent and the router both use it."""
    if spool.full():
        raise ApiError(503, "server_error", "spool_full", spool.full_message())
    if entitlements.stale():
        raise ApiError(503, "server_error", "entitlements_stale", "The agent cannot reach the platform.")
    scheme, _, token = (authorization or "").partition(" ")
    entitlement = entitlements.lookup(token.strip()) if scheme.lower() == "bearer" else None
    if entitlement is None:
        raise ApiError(401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
    if entitlement.status != "active":
        raise ApiError(
            403, "invalid_request_error", "api_key_" + entitlement.status, "This API key may not be used."
        )
    return entitlement


def check_rules(rules: Rules, route: str, body: Any) -> None:
    """The rules file's syntax layer; a violation is a 400 ``rule_violation`` naming the parameter."""
    try:
        rules.check(route, body)
    except RequestRefused as refused:
        raise ApiError(400, "invalid_request_error", "rule_violation", str(refused), refused.param) from None


class Admission:
    def __init__(
        self,
        engine: Engine,
        spool: Spool,
        entitlements: EntitlementStore,
        rules: Rules,
        quota: Quota,
        released: HourlyCalls | None = None,
    ) -> None:
        self.engine = engine
        self.spool = spool
        self.entitlements = entitlements
        self.rules = rules
        self.quota = quota
        self.released = released or HourlyCalls()

    def authenticate(self, authorization: str | None) -> Entitlement:
        """The key's entitlement; refused (no record) when the agent cannot serve or the key may not."""
        return authenticate(self.spool, self.entitlements, authorization)

    def admit(
        self,
        route: str,
        entitlement: Entitlement,
        body: Any,
        now_ns: int,
        path: tuple[str, ...] | None = None,
    ) -> Admitted:
        """Parse, rules, model, context, path (the policy table's, or ``path`` an L1 router decided),
        gray release and quota reservation; a refusal raises ApiError (the caller records it)."""
        request = parse_request(route, body)
        check_rules(self.rules, route, body)
        if request.model not in self.engine.served_names or not entitlement.reaches(self.engine.model_id):
            raise model_not_found(request.model)  # another package's model is as unknown as none
        given = request.prompt
        prompt = given if isinstance(given, str) else self.engine.chat_prompt(given)
        tokens_in = self.engine.count_tokens(prompt)
        self._check_context(request, tokens_in, "prompt" if isinstance(given, str) else "messages")
        path = path or self.rules.path_for(entitlement.package, entitlement.sla_class)
        worst_case = tokens_in + request.n * request.sampling.max_tokens
        reservation = self.reserve_released(entitlement, self.engine.model_id, worst_case, now_ns)
        return Admitted(request, prompt, tokens_in, path, reservation)

    def _check_context(self, request: CompletionRequest, tokens_in: int, param: str) -> None:
        limit, wanted = self.engine.max_model_len, request.sampling.max_tokens
        if tokens_in + wanted > limit:
            raise ApiError(
                400,
                "invalid_request_error",
                "context_length_exceeded",
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{tokens_in + wanted} tokens ({tokens_in} in the {param}, {wanted} in the completion). "
                f"Please reduce the length of the {param} or completion.",
                param,
            )

    def reserve_released(
        self, entitlement: Entitlement, model_id: str, tokens: int, now_ns: int
    ) -> Reservation:
        """The gray release first (403 for a capability its stage does not turn on, 429 above its hourly
        cap; compute_agents.releases), then the quota; a call the quota refuses is not counted."""
        counted = self.released.take(
            entitlement.contract, entitlement.package, entitlement.release, model_id, now_ns
        )
        try:
            return self.reserve(entitlement, tokens, now_ns)
        except ApiError:
            if counted:
                self.released.give_back(entitlement.contract, entitlement.package, model_id, now_ns)
            raise

    def reserve(self, entitlement: Entitlement, tokens: int, now_ns: int) -> Reservation:
        """Hold ``tokens`` of the key's quota; refused with 429, or 503 when no lease can be had."""
        try:
            reservation = self.quota.reserve(entitlement, tokens, now_ns)
        except LeaseUnavailable:
            raise ApiError(
                503,
                "server_error",
                "quota_lease_unavailable",
                "The agent holds no quota for this key and cannot reach the platform for more.",
            ) from None
        if reservation is None:  # retrying cannot help before the quota's month is over
            retry_after = seconds_to_next_month(now_ns)
            raise ApiError(
                429,
                "insufficient_quota",
                "insufficient_quota",
                "This API key's monthly token quota is used up.",
                headers={"Retry-After": str(retry_after), "x-should-retry": "false"},
            )
        return reservation
