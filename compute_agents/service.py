"""One request through the agent: key → entitlement, L1 rules, quota reservation, L2/L3 on the engine,
then the record committed to the spool before the answer goes out.

Which requests leave a record (see docs/agent.md): every request whose key resolves to an active
entitlement. Served requests are ``ok``; requests refused after authentication (bad body, a rules
violation, quota) are ``rejected`` with zero tokens and no experts; engine failures are ``error`` with
the prompt tokens and no output. Only ``ok`` records are billed. Unknown and revoked keys leave no
record: there is no tenant to attribute them to, and no work is done.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import structlog

from treemeter_records import make_record
from treemeter_records.limits import FORBIDDEN_CONTROL, TEXT_MAX

from .engine import Engine, Generation, RoutingCaptureInvalid, expert_counts
from .entitlements import Entitlement, EntitlementStore, Quota, QuotaBook, Reservation
from .expert_cache import ExpertIntegrityError
from .leases import LeaseUnavailable
from .metrics import AgentMetrics
from .router import RequestRefused, Rules
from .spool import QuotaCharge, Spool, SpoolFull

log = structlog.get_logger("compute_agents.service")


class ApiError(Exception):
    """An answer in OpenAI's error shape."""

    def __init__(self, status: int, kind: str, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.code, self.message, self.param = status, kind, code, message, param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass
class Trip:
    """Timings and identity of one request, for its record."""

    route: str
    client_request_id: str
    start_ns: int = field(default_factory=time.time_ns)
    mark: int = field(default_factory=time.perf_counter_ns)
    l1_in_us: int = 0


@dataclass(frozen=True)
class AgentIdentity:
    agent_id: str
    node: str  # this host's L3 node name
    cache_node: str


class AgentService:
    def __init__(
        self,
        identity: AgentIdentity,
        engine: Engine,
        spool: Spool,
        entitlements: EntitlementStore,
        rules: Rules,
        metrics: AgentMetrics,
        quota: Quota | None = None,
    ) -> None:
        self.identity = identity
        self.engine = engine
        self.spool = spool
        self.entitlements = entitlements
        self.quota: Quota = quota or QuotaBook(spool)  # single agent; several share leases
        self.rules = rules
        self.metrics = metrics

    # -- the steps ---------------------------------------------------------------------------------

    def authenticate(self, authorization: str | None) -> Entitlement:
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

    def complete(self, trip: Trip, entitlement: Entitlement, body: Any) -> dict[str, Any]:
        """Serve an authenticated request; every outcome leaves a record (see the module docstring)."""
        admitted = self._admit(trip, entitlement, body)
        generation, record = self._run(trip, entitlement, admitted)
        return self._answer(trip, body, generation, record)

    def stream(self, trip: Trip, entitlement: Entitlement, body: Any) -> Iterator[bytes]:
        """Admit the request now (errors raise before any byte is sent), then stream server-sent events.

        Text chunks go out as the engine produces them; the record is committed before the last chunk
        (finish reason and usage) and ``[DONE]``. A client that leaves early does not stop the metering.
        """
        admitted = self._admit(trip, entitlement, body)
        texts: queue.Queue[str | None] = queue.Queue()
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["result"] = self._run(trip, entitlement, admitted, on_text=texts.put)
            except ApiError as error:
                outcome["error"] = error
            finally:
                texts.put(None)

        # Started now, not on first read: the work and its record happen even if nobody reads.
        threading.Thread(target=work, name="generate", daemon=True).start()
        return self._events(trip, body, texts, outcome)

    def _events(
        self, trip: Trip, body: Any, texts: queue.Queue[str | None], outcome: dict[str, Any]
    ) -> Iterator[bytes]:
        chat = trip.route == "/v1/chat/completions"
        stream_id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        while (text := texts.get()) is not None:
            yield _sse(_chunk(stream_id, trip, body, chat, text, None))
        if "error" in outcome:
            yield _sse(outcome["error"].body())
            return
        generation, record = outcome["result"]
        last = _chunk(stream_id, trip, body, chat, "", generation.finish_reason)
        last["usage"] = _usage(generation)
        last["treemeter"] = {"seq": record["seq"], "record_id": record["record_id"]}
        yield _sse(last)
        yield b"data: [DONE]\n\n"

    def _admit(self, trip: Trip, entitlement: Entitlement, body: Any) -> Admitted:
        """L1: parse, rules, path, quota reservation. A refusal leaves a `rejected` record."""
        try:
            prompt, max_tokens = self._parse(trip.route, body)
            path = self.rules.path_for(entitlement.package, entitlement.sla_class)
            tokens_in = self.engine.count_tokens(prompt)
            try:
                reservation = self.quota.reserve(entitlement, tokens_in + max_tokens, trip.start_ns)
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
        except ApiError as refused:
            self._record(trip, entitlement, None, "rejected", ("L1",))
            raise refused from None
        trip.l1_in_us = (time.perf_counter_ns() - trip.mark) // 1000
        return Admitted(prompt, max_tokens, tokens_in, path, reservation)

    def _run(
        self,
        trip: Trip,
        entitlement: Entitlement,
        admitted: Admitted,
        on_text: Callable[[str], None] | None = None,
    ) -> tuple[Generation, dict[str, Any]]:
        """L2/L3 on the engine, then the record; the quota reservation is released either way."""
        path = admitted.path
        spent = 0
        try:
            try:
                generation = self.engine.generate(
                    admitted.prompt, admitted.max_tokens, use_l2="L2" in path, on_text=on_text
                )
            except ExpertIntegrityError as error:
                self.metrics.integrity_failures.inc()
                log.error("expert_integrity_failure", error=str(error))
                self._record(trip, entitlement, None, "error", path, tokens_in=admitted.tokens_in)
                raise ApiError(
                    503, "server_error", "engine_integrity", "The model's weights failed their check."
                ) from None
            except RoutingCaptureInvalid as error:
                log.error("routing_capture_invalid", error=str(error))
                self._record(trip, entitlement, None, "error", path, tokens_in=admitted.tokens_in)
                raise ApiError(
                    503,
                    "server_error",
                    "routing_capture_invalid",
                    "The engine's routing could not be measured.",
                ) from None
            except Exception as error:
                log.exception("engine_failure", error=str(error))
                self._record(trip, entitlement, None, "error", path, tokens_in=admitted.tokens_in)
                raise ApiError(
                    500, "server_error", "engine_error", "The engine failed on this request."
                ) from None
            record = self._record(trip, entitlement, generation, "ok", path, reservation=admitted.reservation)
            spent = generation.tokens_in + generation.tokens_out
        finally:
            self.quota.release(admitted.reservation, spent)
        return generation, record

    # -- helpers -----------------------------------------------------------------------------------

    def _parse(self, route: str, body: Any) -> tuple[str, int]:
        if not isinstance(body, dict):
            raise ApiError(400, "invalid_request_error", "invalid_body", "The body must be a JSON object.")
        if not isinstance(body.get("stream", False), bool):
            raise ApiError(
                400, "invalid_request_error", "invalid_value", "stream must be a boolean.", "stream"
            )
        max_tokens = body.get("max_tokens", 16)
        if type(max_tokens) is not int or max_tokens < 1:
            raise ApiError(
                400,
                "invalid_request_error",
                "invalid_value",
                "max_tokens must be a positive integer.",
                "max_tokens",
            )
        if route == "/v1/chat/completions":
            messages = body.get("messages")
            if (
                not isinstance(messages, list)
                or not messages
                or not all(
                    isinstance(m, dict)
                    and m.get("role") in ("system", "user", "assistant")
                    and isinstance(m.get("content"), str)
                    for m in messages
                )
            ):
                raise ApiError(
                    400,
                    "invalid_request_error",
                    "invalid_value",
                    "messages must be a non-empty list of {role, content}, role system, user or assistant.",
                    "messages",
                )
            prompt = self.engine.chat_prompt(messages)
        else:
            given = body.get("prompt")
            if not isinstance(given, str) or not given:
                raise ApiError(
                    400,
                    "invalid_request_error",
                    "invalid_value",
                    "prompt must be a non-empty string.",
                    "prompt",
                )
            prompt = given
        if not isinstance(body.get("model"), str):
            raise ApiError(400, "invalid_request_error", "invalid_value", "model must be a string.", "model")
        try:
            self.rules.check(route, body)
        except RequestRefused as refused:
            raise ApiError(
                400, "invalid_request_error", "rule_violation", str(refused), refused.param
            ) from None
        return prompt, max_tokens

    def _record(
        self,
        trip: Trip,
        entitlement: Entitlement,
        generation: Generation | None,
        status: str,
        path: tuple[str, ...],
        *,
        tokens_in: int = 0,
        reservation: Reservation | None = None,
    ) -> dict[str, Any]:
        l1_in = trip.l1_in_us or (time.perf_counter_ns() - trip.mark) // 1000
        experts: list[dict[str, int]] = []
        hits = misses = 0
        if generation is not None:
            experts = expert_counts(generation.routed, self.engine.num_experts)
            hits, misses = generation.expert_cache_hits, generation.expert_cache_misses
            tokens_in = generation.tokens_in
        tokens_out = generation.tokens_out if generation is not None else 0
        hop_latency = {
            "L2": generation.l2_us if generation else 0,
            "L3": generation.l3_us if generation else 0,
        }
        nodes = {"L1": self.rules.node, "L2": self.identity.cache_node, "L3": self.identity.node}
        end_ns = time.time_ns()
        l1_out = max(0, (end_ns - trip.start_ns) // 1000 - l1_in - hop_latency["L2"] - hop_latency["L3"])
        hops = []
        for index, layer in enumerate(path):
            latency = (l1_in if index == 0 else l1_out) if layer == "L1" else hop_latency[layer]
            hops.append({"layer": layer, "node": nodes[layer], "latency_us": latency})
        charge = (
            QuotaCharge(reservation.key_hash, reservation.period, tokens_in + tokens_out, reservation.lease)
            if reservation is not None
            else None
        )

        def build(seq: int) -> dict[str, Any]:
            return make_record(
                agent_id=self.identity.agent_id,
                seq=seq,
                tenant=entitlement.tenant,
                contract=entitlement.contract,
                package=entitlement.package,
                sla_class=entitlement.sla_class,
                client_request_id=trip.client_request_id,
                model_id=self.engine.model_id,
                weights_sha3=self.engine.weights_sha3,
                start_ns=trip.start_ns,
                end_ns=end_ns,
                clock_drift_us=self.entitlements.clock_drift_us,
                tokens_in=tokens_in,
                tokens_out=tokens_out,
                hops=hops,
                experts=experts,
                prefix_cache_hit_tokens=generation.prefix_cache_hit_tokens if generation else 0,
                expert_cache_hits=hits,
                expert_cache_misses=misses,
                status=status,
            )

        try:
            record = self.spool.append(build, charge)
        except SpoolFull as full:
            raise ApiError(503, "server_error", "spool_full", str(full)) from None
        self._observe(trip, record, generation)
        return record

    def _observe(self, trip: Trip, record: dict[str, Any], generation: Generation | None) -> None:
        m = self.metrics
        m.requests.labels(trip.route, record["status"]).inc()
        if generation is None:
            return
        m.tokens.labels("in").inc(record["tokens_in"])
        m.tokens.labels("out").inc(record["tokens_out"])
        for entry in record["experts"]:
            m.expert_activations.labels(str(entry["layer"]), str(entry["expert"])).inc(entry["tokens"])
        m.observe_cache(record["expert_cache_hits"], record["expert_cache_misses"])
        for hop in record["hops"]:
            m.layer_latency.labels(hop["layer"]).observe(hop["latency_us"] / 1e6)

    def _answer(
        self, trip: Trip, body: dict[str, Any], generation: Generation, record: dict[str, Any]
    ) -> dict[str, Any]:
        usage = _usage(generation)
        created = trip.start_ns // 1_000_000_000
        if trip.route == "/v1/chat/completions":
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": generation.text},
                "finish_reason": generation.finish_reason,
            }
            kind, prefix = "chat.completion", "chatcmpl-"
        else:
            choice = {
                "index": 0,
                "text": generation.text,
                "logprobs": None,
                "finish_reason": generation.finish_reason,
            }
            kind, prefix = "text_completion", "cmpl-"
        return {
            "id": prefix + record["record_id"],
            "object": kind,
            "created": created,
            "model": body["model"],
            "choices": [choice],
            "usage": usage,
            "treemeter": {"seq": record["seq"], "record_id": record["record_id"]},
        }


@dataclass(frozen=True)
class Admitted:
    prompt: str
    max_tokens: int
    tokens_in: int
    path: tuple[str, ...]
    reservation: Reservation


def _usage(generation: Generation) -> dict[str, int]:
    return {
        "prompt_tokens": generation.tokens_in,
        "completion_tokens": generation.tokens_out,
        "total_tokens": generation.tokens_in + generation.tokens_out,
    }


def _chunk(
    stream_id: str, trip: Trip, body: dict[str, Any], chat: bool, text: str, finish: str | None
) -> dict[str, Any]:
    if chat:
        choice: dict[str, Any] = {
            "index": 0,
            "delta": {"content": text} if text else {},
            "finish_reason": finish,
        }
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    return {
        "id": stream_id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": trip.start_ns // 1_000_000_000,
        "model": body["model"],
        "choices": [choice],
    }


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


def new_client_request_id(header: str | None) -> str:
    """The caller's x-request-id as the record's client_request_id: cut to the format's length, without the
    control characters the format refuses; a fresh id when there is none."""
    given = "".join(ch for ch in (header or "")[:TEXT_MAX] if ch not in FORBIDDEN_CONTROL)
    return given or f"req-{uuid.uuid4().hex}"
