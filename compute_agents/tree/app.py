"""The router's HTTP API: the customer's OpenAI-compatible routes (relayed to an executor), the
executors' signed heartbeats, and what the tree looks like now. Errors keep OpenAI's shape."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException

from treemeter_records import new_record_id
from treemeter_records.receipts import RECEIPT_HEADER

from ..admission import model_not_found
from ..app import http_error
from ..wire import ApiError, error_body, sse
from .forward import ExecutorClient, NoExecutor, relay, send
from .heartbeat import HEARTBEAT_PATH
from .jobs_api import CALLBACK_HEADER, JobsApi, add_job_routes
from .lines import QueueFull, Slot
from .preparation import EXPERTS_HEADER
from .registry import HeartbeatError
from .service import RouterService, Routing

RELAYED_HEADERS = ("content-type", "x-request-id", "retry-after", "x-should-retry", RECEIPT_HEADER.lower())


def create_router_app(service: RouterService, client: ExecutorClient, jobs: JobsApi | None = None) -> FastAPI:
    """The router's app; with ``jobs``, the asynchronous path too (policy rows marked ``queued``, the
    Batch API). Without it the rules must not queue (``tree.runtime`` checks at start). The app closes
    ``client`` when it shuts down."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await client.close()

    app = FastAPI(title="Treemeter L1 router", docs_url=None, redoc_url=None, lifespan=lifespan)
    metrics = CollectorRegistry()
    routed = Counter("treemeter_router_requests", "Requests by outcome", ["outcome"], registry=metrics)
    if service.scheduling is not None:
        moved = Counter(
            "treemeter_router_scheduler_events",
            "Scheduler events (borrow, return, scale_up, scale_down) by subtree",
            ["kind", "subtree"],
            registry=metrics,
        )
        service.scheduling.listeners.append(lambda event: moved.labels(event.kind, event.subtree).inc())

    app.add_exception_handler(HTTPException, http_error)

    def refused(error: ApiError) -> Response:
        headers = {"x-request-id": new_record_id(), **error.headers}
        return JSONResponse(error.body(), status_code=error.status, headers=headers)

    async def serve(request: Request, route: str) -> Response:
        raw = await request.body()
        try:
            body: Any = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None  # refused by admit, with a rejected record
        try:  # the classifier and a refusal's spool commit must not hold the event loop
            routing = await run_in_threadpool(
                service.admit, route, request.headers.get("authorization"), body
            )
        except ApiError as error:
            routed.labels(error.code).inc()
            return refused(error)
        incoming = dict(request.headers)
        stream = isinstance(body, dict) and body.get("stream") is True
        if routing.decision.queued and jobs is not None:
            routed.labels("queued").inc()
            try:
                if stream:
                    raise ApiError(
                        400,
                        "invalid_request_error",
                        "stream_not_queued",
                        "This request class is served asynchronously (a job): it cannot stream.",
                        "stream",
                    )
                return await jobs.accept(
                    routing, raw, incoming.get("authorization", ""), incoming.get(CALLBACK_HEADER)
                )
            except ApiError as error:
                return refused(error)
        routing = service.fallback(routing)
        slot = Slot(None, routing.decision.subtree)
        if service.lines is not None:
            try:
                slot = await service.lines.enter(slot.subtree, service.priority(routing), time.monotonic())
            except QueueFull:
                routed.labels("queue_full").inc()
                return refused(await run_in_threadpool(service.queue_full, routing))
        try:
            return await relayed(routing, route, raw, incoming, stream, slot)
        except BaseException:
            slot.release()
            raise

    async def relayed(
        routing: Routing, route: str, raw: bytes, incoming: dict[str, str], stream: bool, slot: Slot
    ) -> Response:
        """Send to an executor (failing over) and relay its answer; the subtree's slot is given back
        when the answer is read, when a stream's relay ends, or when no executor could serve."""
        # From the first attempt until the answer is handed to the customer's connection the request is
        # in the in-flight ledger: a router that dies meanwhile supersedes its attempts when it restarts.
        try:
            attempt = await send(
                client,
                service.registry,
                routing.decision.subtree,
                routing.model,
                route,
                raw,
                lambda executor, supersedes: service.attempting(routing, executor, incoming, supersedes),
                stream=stream,
                affinity=routing.experts,
            )
        except NoExecutor as none:
            routed.labels("no_executor").inc()
            slot.release()
            unserved = await run_in_threadpool(service.unserved, routing, none.tried, none.unanswered)
            service.settled(routing)  # its record supersedes what was sent and not answered
            return refused(unserved)
        response = attempt.response
        headers = {name: response.headers[name] for name in RELAYED_HEADERS if name in response.headers}
        routed.labels("relayed").inc()
        if stream and response.status == 200:
            service.served(attempt.executor, attempt.number)
            cut = sse(error_body("The executor stopped mid-stream.", "server_error", "executor_lost"))

            async def streamed() -> AsyncIterator[bytes]:
                try:
                    async for chunk in relay(attempt, service.registry, lambda: cut):
                        yield chunk
                    service.answered(routing)
                finally:
                    slot.release()
                    service.settled(routing)

            return StreamingResponse(
                streamed(), status_code=200, headers=headers, background=BackgroundTask(slot.release)
            )
        content = await attempt.read()
        slot.release()
        service.registry.finished(attempt.executor, ok=True)
        service.served(attempt.executor, attempt.number)
        if response.status == 200:
            service.learn(routing, response.headers.get(EXPERTS_HEADER))
            service.answered(routing)
        # Settled once the bytes are handed to the connection (Starlette runs the task after the body).
        return Response(
            content,
            status_code=response.status,
            headers=headers,
            background=BackgroundTask(service.settled, routing),
        )

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await serve(request, "/v1/completions")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await serve(request, "/v1/chat/completions")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        cards = [{"id": name, "object": "model", "owned_by": "treemeter"} for name in service.served_names()]
        return {"object": "list", "data": cards}

    @app.get("/v1/models/{model:path}")
    async def model(model: str) -> Response:
        headers = {"x-request-id": new_record_id()}
        if model not in service.served_names():
            error = model_not_found(model)
            return JSONResponse(error.body(), status_code=error.status, headers=headers)
        return JSONResponse({"id": model, "object": "model", "owned_by": "treemeter"}, headers=headers)

    @app.post(HEARTBEAT_PATH)
    async def heartbeat(request: Request) -> Response:
        raw = await request.body()
        try:
            beat = service.heartbeat(dict(request.headers), HEARTBEAT_PATH, raw, orjson.loads(raw))
        except (HeartbeatError, orjson.JSONDecodeError) as error:
            return JSONResponse(error_body(str(error), "invalid_request_error", "bad_heartbeat"), 400)
        except PermissionError as error:
            return JSONResponse(error_body(str(error), "invalid_request_error", "unknown_executor"), 403)
        return JSONResponse({"executor": beat.executor, "accepted": True})

    @app.get("/tree/executors")
    async def executors() -> dict[str, Any]:
        return {
            "router": service.agent_id,
            "node": service.rules.node,
            "executors": service.registry.snapshot(),
        }

    @app.get("/tree/stats")
    async def stats() -> dict[str, Any]:
        return service.stats.as_dict()

    @app.get("/tree/scheduler")
    async def scheduler() -> dict[str, Any]:
        """The subtrees' loads and lines, the units lent now, and the event outbox's counts."""
        if service.scheduling is None:
            return {"configured": False}
        return service.scheduling.snapshot()

    if jobs is not None:
        add_job_routes(app, jobs)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics), media_type=CONTENT_TYPE_LATEST)

    return app
