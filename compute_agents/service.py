"""One request through the agent: admission (key → entitlement, L1 rules, path, quota reservation), L2/L3
on the engine, then the record committed to the spool before the answer goes out.

This module serves (a whole answer or a stream) and maps engine failures to answers; what it uses:
``admission`` (who may run what, on which path, with which quota), ``metering`` (the record, the spool,
the metrics) and ``wire`` (the OpenAI shapes).

Which requests leave a record (see docs/agent.md): every request whose key resolves to an active
entitlement. Served requests are ``ok``; requests refused after authentication (bad body, a rules
violation, an unknown model, a prompt over the context, quota) are ``rejected`` with zero tokens and no
experts; engine failures are ``error`` with the prompt tokens and no output; a request whose client went
away is ``cancelled``, with what was produced until then (generation stops within one decoding step).
Only ``ok`` records are billed. Unknown and revoked keys leave no
record: there is no tenant to attribute them to, and no work is done.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog

from . import wire
from .admission import Admission, Admitted
from .capabilities import CapabilityService
from .engine import Engine, Generation, RoutingCaptureInvalid
from .entitlements import Entitlement, EntitlementStore, Quota, QuotaBook
from .expert_cache import ExpertIntegrityError
from .metering import AgentIdentity, Meter, Trip
from .metrics import AgentMetrics
from .onnx_executor import OnnxExecutor
from .router import Rules
from .spool import Spool
from .tree.decision import DecisionReader
from .wire import ApiError, new_client_request_id

__all__ = ["AgentIdentity", "AgentService", "ApiError", "Trip", "new_client_request_id"]

log = structlog.get_logger("compute_agents.service")

Emit = Callable[[bytes | None], None]  # a stream's next server-sent event; None: the stream is over
TextSink = Callable[[int], Callable[[str], None]]  # choice index → where its text goes, as it comes


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
        decisions: DecisionReader | None = None,
        onnx: OnnxExecutor | None = None,
    ) -> None:
        self.identity = identity
        self.decisions = decisions  # behind an L1 router: only requests it decided are served
        self.outstanding = 0  # admitted requests not yet recorded (an executor's heartbeat reports it)
        self._outstanding_lock = threading.Lock()
        self.engine = engine
        self.spool = spool
        self.entitlements = entitlements
        self.quota: Quota = quota or QuotaBook(spool)  # single agent; several share leases
        self.rules = rules
        self.metrics = metrics
        self.admission = Admission(engine, spool, entitlements, rules, self.quota)
        self.meter = Meter(identity, engine, spool, entitlements, rules.node, metrics)
        # ONNX capabilities (``serve --onnx-config``), served beside the engine's completions.
        self.capabilities = CapabilityService(onnx, self.admission, self.meter) if onnx is not None else None

    def authenticate(self, authorization: str | None) -> Entitlement:
        return self.admission.authenticate(authorization)

    def complete(
        self, trip: Trip, entitlement: Entitlement, body: Any, cancelled: threading.Event | None = None
    ) -> dict[str, Any]:
        """Serve an authenticated request; every outcome leaves a record (see the module docstring)."""
        admitted = self._admit(trip, entitlement, body)
        choices, record = self._run(trip, entitlement, admitted, cancelled)
        texts = [(choice.text, choice.finish_reason) for choice in choices]
        created = trip.start_ns // 1_000_000_000
        return wire.answer(trip.route, created, self.engine.model_id, texts, record, trip.receipt)

    def stream(
        self, trip: Trip, entitlement: Entitlement, body: Any, emit: Emit, cancelled: threading.Event
    ) -> None:
        """Admit the request now (errors raise before any byte is sent), then generate in a thread that
        hands each server-sent event to ``emit``: a chat's choice starts with the assistant role, text
        chunks follow as the engine decodes; the record is committed before the finish chunks (the last
        carries the record's reference), the usage chunk if asked for, and ``[DONE]``."""
        admitted = self._admit(trip, entitlement, body)
        # Started now, not on first read: the work and its record happen even if nobody reads.
        threading.Thread(
            target=self._stream,
            args=(trip, entitlement, admitted, emit, cancelled),
            name="generate",
            daemon=True,
        ).start()

    def _stream(
        self, trip: Trip, entitlement: Entitlement, admitted: Admitted, emit: Emit, cancelled: threading.Event
    ) -> None:
        request = admitted.request
        chunks = wire.Chunks(
            trip.route,
            trip.record_id,
            trip.start_ns // 1_000_000_000,
            self.engine.model_id,
            request.include_usage,
        )

        def sink(index: int) -> Callable[[str], None]:
            if chunks.chat:
                emit(wire.sse(chunks.choice(index, None, None, role=True)))
            return lambda text: emit(wire.sse(chunks.choice(index, text, None)))

        try:
            try:
                choices, record = self._run(trip, entitlement, admitted, cancelled, sink)
            except ApiError as error:
                emit(wire.sse(error.body()))
                return
            for index, choice in enumerate(choices):
                finish = chunks.choice(index, None, choice.finish_reason)
                if index == len(choices) - 1:
                    finish["treemeter"] = wire.treemeter_ref(record, trip.receipt)
                emit(wire.sse(finish))
            if request.include_usage:
                emit(wire.sse(chunks.usage(record)))
            emit(wire.SSE_DONE)
        finally:
            emit(None)

    def _admit(self, trip: Trip, entitlement: Entitlement, body: Any) -> Admitted:
        """L1; a refusal leaves a `rejected` record."""
        try:
            admitted = self.admission.admit(trip.route, entitlement, body, trip.start_ns, trip.path)
        except ApiError as refused:
            self.meter.record(trip, entitlement, (), "rejected", ("L1",))
            raise refused from None
        trip.admitted()
        return admitted

    def _run(
        self,
        trip: Trip,
        entitlement: Entitlement,
        admitted: Admitted,
        cancelled: threading.Event | None,
        sink: TextSink | None = None,
    ) -> tuple[list[Generation], dict[str, Any]]:
        """L2/L3 on the engine for each of the request's ``n`` choices (the seed advanced by one per
        choice), then the record; the quota reservation is released either way."""
        path, request = admitted.path, admitted.request
        choices: list[Generation] = []
        spent = 0
        self._count_outstanding(1)
        try:
            try:
                for index in range(request.n):
                    if cancelled is not None and cancelled.is_set():
                        break
                    seed = request.sampling.seed
                    sampling = (
                        request.sampling if seed is None else replace(request.sampling, seed=seed + index)
                    )
                    choices.append(
                        self.engine.generate(
                            admitted.prompt,
                            sampling,
                            use_l2="L2" in path,
                            preheat=trip.preheat,
                            on_text=None if sink is None else sink(index),
                            cancelled=cancelled,
                        )
                    )
            except Exception as error:
                failure = self._engine_failure(error)
                self.meter.record(trip, entitlement, (), "error", path, tokens_in=admitted.tokens_in)
                raise failure from None
            status = "cancelled" if cancelled is not None and cancelled.is_set() else "ok"
            record = self.meter.record(
                trip,
                entitlement,
                choices,
                status,
                path,
                tokens_in=admitted.tokens_in,
                reservation=admitted.reservation,
            )
            spent = record["tokens_in"] + record["tokens_out"]
        finally:
            self.quota.release(admitted.reservation, spent)
            self._count_outstanding(-1)
        return choices, record

    def _count_outstanding(self, change: int) -> None:
        with self._outstanding_lock:
            self.outstanding += change

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
