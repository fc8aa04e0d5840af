"""The OpenAI-compatible HTTP API (FastAPI): /v1/completions, /v1/chat/completions, /v1/models, /metrics."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .metering import Trip
from .service import AgentService
from .wire import ApiError, new_client_request_id


def create_app(service: AgentService) -> FastAPI:
    app = FastAPI(title="Treemeter compute agent", docs_url=None, redoc_url=None)

    async def serve(request: Request, route: str) -> Response:
        trip = Trip(route, new_client_request_id(request.headers.get("x-request-id")))
        try:
            entitlement = service.authenticate(request.headers.get("authorization"))
        except ApiError as error:
            service.metrics.requests.labels(route, f"http_{error.status}").inc()
            return JSONResponse(error.body(), status_code=error.status)
        try:
            body: Any = await request.json()
        except ValueError:
            body = None
        try:
            if isinstance(body, dict) and body.get("stream") is True:
                events = await run_in_threadpool(service.stream, trip, entitlement, body)
                return StreamingResponse(events, media_type="text/event-stream")
            answer = await run_in_threadpool(service.complete, trip, entitlement, body)
        except ApiError as error:
            return JSONResponse(error.body(), status_code=error.status)
        return JSONResponse(answer)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await serve(request, "/v1/completions")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await serve(request, "/v1/chat/completions")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": service.engine.model_id, "object": "model", "owned_by": "treemeter"}],
        }

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
