"""One request through the agent: admission (key → entitlement, L1 rules, path, quota reservation), L2/L3
on the engine, then the record committed to the spool before the answer goes out.

This module serves (a whole answer or a stream) and maps engine failures to answers; what it uses:
``admission`` (who may run what, on which path, with which quota), ``metering`` (the record, the spool,
the metrics) and ``wire`` (the OpenAI shapes).

Which requests leave a record (see docs/agent.md): every request whose key resolves to an active
entitlement. Served requests are ``ok``; requests refused after authentication (bad body, a rules
violation, quota) are ``rejected`` with zero tokens and no experts; engine failures are ``error`` with
the prompt tokens and no output. Only ``ok`` records are billed. Unknown and revoked keys leave no
record: there is no tenant to attribute them to, and no work is done.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import structlog

from . import wire
from .admission import Admission, Admitted
from .engine import Engine, Generation, RoutingCaptureInvalid
from .entitlements import Entitlement, EntitlementStore, Quota, QuotaBook
from .expert_cache import ExpertIntegrityError
from .metering import AgentIdentity, Meter, Trip
from .metrics import AgentMetrics
from .router import Rules
from .spool import Spool
from .wire import ApiError, new_client_request_id

__all__ = ["AgentIdentity", "AgentService", "ApiError", "Trip", "new_client_request_id"]

log = structlog.get_logger("compute_agents.service")


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
        self.admission = Admission(engine, spool, entitlements, rules, self.quota)
        self.meter = Meter(identity, engine, spool, entitlements, rules.node, metrics)

    def authenticate(self, authorization: str | None) -> Entitlement:
        return self.admission.authenticate(authorization)

    def complete(self, trip: Trip, entitlement: Entitlement, body: Any) -> dict[str, Any]:
        """Serve an authenticated request; every outcome leaves a record (see the module docstring)."""
        admitted = self._admit(trip, entitlement, body)
        generation, record = self._run(trip, entitlement, admitted)
        return wire.answer(trip.route, trip.start_ns // 1_000_000_000, body["model"], generation, record)

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
        stream_id = wire.new_stream_id(trip.route)
        created, model = trip.start_ns // 1_000_000_000, body["model"]
        while (text := texts.get()) is not None:
            yield wire.sse(wire.chunk(stream_id, trip.route, created, model, text, None))
        if "error" in outcome:
            yield wire.sse(outcome["error"].body())
            return
        generation, record = outcome["result"]
        last = wire.chunk(stream_id, trip.route, created, model, "", generation.finish_reason)
        last["usage"] = wire.usage(generation)
        last["treemeter"] = wire.treemeter_ref(record)
        yield wire.sse(last)
        yield wire.SSE_DONE

    def _admit(self, trip: Trip, entitlement: Entitlement, body: Any) -> Admitted:
        """L1; a refusal leaves a `rejected` record."""
        try:
            admitted = self.admission.admit(trip.route, entitlement, body, trip.start_ns)
        except ApiError as refused:
            self.meter.record(trip, entitlement, None, "rejected", ("L1",))
            raise refused from None
        trip.admitted()
        return admitted

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
            except Exception as error:
                failure = self._engine_failure(error)
                self.meter.record(trip, entitlement, None, "error", path, tokens_in=admitted.tokens_in)
                raise failure from None
            record = self.meter.record(
                trip, entitlement, generation, "ok", path, reservation=admitted.reservation
            )
            spent = generation.tokens_in + generation.tokens_out
        finally:
            self.quota.release(admitted.reservation, spent)
        return generation, record

    def _engine_failure(self, error: Exception) -> ApiError:
        """What the client is told (and the logs and metrics say) when the engine failed a request."""
        if isinstance(error, ExpertIntegrityError):
            self.metrics.integrity_failures.inc()
            log.error("expert_integrity_failure", error=str(error))
            return ApiError(
                503, "server_error", "engine_integrity", "The model's weights failed their check."
            )
        if isinstance(error, RoutingCaptureInvalid):
            log.error("routing_capture_invalid", error=str(error))
            return ApiError(
                503, "server_error", "routing_capture_invalid", "The engine's routing could not be measured."
            )
        log.exception("engine_failure", error=str(error))
        return ApiError(500, "server_error", "engine_error", "The engine failed on this request.")
