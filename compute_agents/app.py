"""The OpenAI-compatible HTTP API (FastAPI): /v1/completions, /v1/chat/completions, /v1/models,
/v1/models/{id}, /metrics, and with ONNX capabilities /v1/capabilities/{code}/invocations. Every answer
carries ``x-request-id`` (the request's record id), every metered one its receipt (``Treemeter-Receipt``;
a stream's in its last finish chunk), and every error OpenAI's shape, unknown paths and methods included.
A client that goes away cancels its request: a stream when its connection closes, a whole answer while it
is being generated."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import numpy
import orjson
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException

from treemeter_records import new_record_id
from treemeter_records.receipts import RECEIPT_HEADER

from .admission import model_not_found
from .capabilities import ROUTE as CAPABILITY_ROUTE
from .entitlements import Entitlement
from .metering import Trip
from .service import AgentService
from .tree.decision import DECISION_HEADER
from .tree.preparation import EXPERTS_HEADER, experts_header
from .wire import ApiError, error_body, new_client_request_id

HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


async def http_error(request: Request, error: Exception) -> Response:
    """Unknown paths and methods in OpenAI's error shape, with an x-request-id (the agent's and the
    router's apps both answer so)."""
    if not isinstance(error, HTTPException):  # registered for HTTPException only
        raise error
    code = HTTP_CODES.get(error.status_code, f"http_{error.status_code}")
    message = f"{request.method} {request.url.path}: {error.detail}"
    headers = {**(error.headers or {}), "x-request-id": new_record_id()}
    return JSONResponse(
        error_body(message, "invalid_request_error", code), error.status_code, headers=headers
    )


def create_app(service: AgentService) -> FastAPI:
    app = FastAPI(title="Treemeter compute agent", docs_url=None, redoc_url=None)
    app.add_exception_handler(HTTPException, http_error)

    def metered(trip: Trip) -> dict[str, str]:
        """The headers of an answer: its record id, and its receipt once it has a record."""
        headers = {"x-request-id": trip.record_id}
        if trip.receipt is not None:
            headers[RECEIPT_HEADER] = trip.receipt
        return headers

    def refused(error: ApiError, trip: Trip) -> Response:
        # Refused with a record (rejected, or an engine error): receipted too.
        return JSONResponse(
            error.body(), status_code=error.status, headers={**error.headers, **metered(trip)}
        )

    def authenticate(request: Request, trip: Trip) -> Entitlement:
        """The key's entitlement; a refusal (no record) is counted and raised."""
        try:
            return service.authenticate(request.headers.get("authorization"))
        except ApiError as error:
            service.metrics.requests.labels(trip.route, f"http_{error.status}").inc()
            raise

    async def serve(request: Request, route: str) -> Response:
        given = request.headers.get("x-request-id")
        if service.decisions is None:
            record_id = new_record_id()
            trip = Trip(route, new_client_request_id(given, record_id), record_id)
        else:
            try:  # refused without a record: a request no router decided has no accountable path
                routed = service.decisions.read(request.headers.get(DECISION_HEADER))
            except ApiError as error:
                return refused(error, Trip(route, "", new_record_id()))
            trip = Trip.routed(route, new_client_request_id(given, routed.claims["record_id"]), routed)
        try:
            entitlement = authenticate(request, trip)
        except ApiError as error:
            return refused(error, trip)
        body = await json_body(request)
        cancelled = threading.Event()
        try:
            if isinstance(body, dict) and body.get("stream") is True:
                events = await open_stream(trip, entitlement, body, cancelled)
                return StreamingResponse(
                    events, media_type="text/event-stream", headers={"x-request-id": trip.record_id}
                )
            answer = await until_done_or_gone(
                request, cancelled, run_in_threadpool(service.complete, trip, entitlement, body, cancelled)
            )
        except ApiError as error:
            return refused(error, trip)
        headers = metered(trip)
        if trip.decision is not None and trip.experts:  # for the router's next preheats of this domain
            headers[EXPERTS_HEADER] = experts_header(trip.experts)
        return JSONResponse(answer, headers=headers)

    async def open_stream(
        trip: Trip, entitlement: Any, body: Any, cancelled: threading.Event
    ) -> AsyncIterator[bytes]:
        """Admit (an ApiError raises here), then the events the engine's thread emits. When the client
        goes away Starlette cancels the iteration, and ``cancelled`` stops the engine."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()

        def emit(event: bytes | None) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: so is the client
                loop.call_soon_threadsafe(queue.put_nowait, event)

        await run_in_threadpool(service.stream, trip, entitlement, body, emit, cancelled)

        async def events() -> AsyncIterator[bytes]:
            try:
                while (event := await queue.get()) is not None:
                    yield event
                    # A turn of the loop per event: Starlette's disconnect listener runs, so a client that
                    # went away stops the engine within an event, not after the queue has drained.
                    await asyncio.sleep(0)
            finally:
                cancelled.set()  # after the last event a no-op: the record is committed by then

        return events()

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await serve(request, "/v1/completions")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await serve(request, "/v1/chat/completions")

    def model_card(name: str) -> dict[str, Any]:
        engine = service.engine
        return {
            "id": name,
            "object": "model",
            "created": engine.created,
            "owned_by": "treemeter",
            "root": engine.model_id,
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card(name) for name in service.engine.served_names]}

    @app.get("/v1/models/{model:path}")
    async def model(model: str) -> Response:
        headers = {"x-request-id": new_record_id()}
        if model not in service.engine.served_names:
            error = model_not_found(model)
            return JSONResponse(error.body(), status_code=error.status, headers=headers)
        return JSONResponse(model_card(model), headers=headers)

    capabilities = service.capabilities
    if capabilities is not None:  # a stand-alone agent only: an L1 router does not route capabilities

        @app.post(CAPABILITY_ROUTE)
        async def invoke_capability(code: str, request: Request) -> Response:
            record_id = new_record_id()
            given = request.headers.get("x-request-id")
            trip = Trip(CAPABILITY_ROUTE, new_client_request_id(given, record_id), record_id)
            try:
                entitlement = authenticate(request, trip)
                body = await json_body(request)
                answer = await run_in_threadpool(capabilities.invoke, trip, entitlement, code, body)
            except ApiError as error:
                return refused(error, trip)
            # The outputs' arrays as JSON lists (orjson's own, or through tolist for a 0-d array; a
            # non-finite float as null).
            content = orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY, default=numpy.ndarray.tolist)
            return Response(content, media_type="application/json", headers=metered(trip))

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


async def json_body(request: Request) -> Any:
    """The request's JSON body; None when it is not JSON (admission refuses it, with a record)."""
    try:
        return await request.json()
    except ValueError:
        return None


async def until_done_or_gone(request: Request, cancelled: threading.Event, work: Any) -> Any:
    """Await ``work``; if the client disconnects meanwhile, set ``cancelled`` (the engine stops after its
    step) and still await the work, which records the request as cancelled."""

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        cancelled.set()

    watcher = asyncio.ensure_future(watch())
    try:
        return await work
    finally:
        watcher.cancel()
