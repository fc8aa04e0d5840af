"""The router's HTTP API of the asynchronous path: a queued request's 202, polling a job, the Batch API
(files and batches, OpenAI's shapes), the callback key, and the workers' dispatch endpoint.

Every customer route authenticates the key and shows only what belongs to its contract: another
contract's job, file or batch is ``404`` as if it did not exist.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import UploadFile

from treemeter_records import key_id_for, new_record_id, public_key_to_b64

from ..admission import authenticate
from ..entitlements import Entitlement
from ..jobs.batches import (
    COMPLETION_WINDOWS,
    MAX_FILE_BYTES,
    BatchInputError,
    batch_object,
    parse_batch_input,
    refused_line,
    result_files,
)
from ..jobs.callbacks import CallbackRefused, check_callback_url
from ..jobs.queue import TOKEN_HEADER, Publisher, token_valid
from ..jobs.store import Batch, Job, JobStore, StoredFile
from ..wire import ApiError
from .jobs import JobRunner
from .service import Routing

CALLBACK_HEADER = "x-treemeter-callback-url"


@dataclass
class JobsApi:
    runner: JobRunner
    store: JobStore
    publisher: Publisher
    private_callbacks: bool = False  # callbacks may reach addresses inside the network

    @property
    def service(self) -> Any:
        return self.runner.service

    def owner(self, authorization: str | None) -> Entitlement:
        return authenticate(self.service.spool, self.service.entitlements, authorization)

    async def accept(
        self, routing: Routing, raw: bytes, authorization: str, callback_url: str | None
    ) -> Response:
        """A request the policy queues: its job, 202 (after the job is on disk)."""
        if callback_url is not None:
            try:
                check_callback_url(callback_url, allow_private=self.private_callbacks, resolve=False)
            except CallbackRefused as refused:
                raise ApiError(400, "invalid_request_error", "invalid_callback_url", str(refused)) from None
        job = await run_in_threadpool(self.runner.accept, routing, raw, authorization, callback_url)
        self.publisher.wake()
        return JSONResponse(
            job.as_api(), status_code=202, headers={"location": f"/v1/jobs/{job.id}", "x-request-id": job.id}
        )


def _not_found(kind: str, name: str) -> ApiError:
    return ApiError(404, "invalid_request_error", f"{kind}_not_found", f"No {kind} '{name}'.")


def _mine(entitlement: Entitlement, item: Job | Batch | StoredFile | None, kind: str, name: str) -> Any:
    if item is None or (item.tenant, item.contract) != (entitlement.tenant, entitlement.contract):
        raise _not_found(kind, name)
    return item


def add_job_routes(app: FastAPI, api: JobsApi) -> None:
    store, runner = api.store, api.runner

    def answer(error: ApiError) -> Response:
        return JSONResponse(error.body(), status_code=error.status, headers={"x-request-id": new_record_id()})

    @app.get("/v1/jobs/callback-key")
    async def callback_key() -> dict[str, str]:
        key = api.service.key
        return {"key_id": key_id_for(key), "public_key": public_key_to_b64(key)}

    @app.get("/v1/jobs/{job_id}")
    async def job(job_id: str, request: Request) -> Response:
        try:
            owner = api.owner(request.headers.get("authorization"))
            found = _mine(owner, await run_in_threadpool(store.get, job_id), "job", job_id)
        except ApiError as error:
            return answer(error)
        return JSONResponse(found.as_api())

    @app.post("/tree/jobs/{job_id}/run")
    async def run(job_id: str, request: Request) -> Response:
        if not token_valid(api.service.key.public_key(), job_id, request.headers.get(TOKEN_HEADER, "")):
            return answer(
                ApiError(403, "invalid_request_error", "bad_job_token", "Not a job of this router.")
            )
        dispatched = await runner.run(job_id)
        return JSONResponse(dispatched.body(), status_code=dispatched.status)

    @app.post("/v1/files")
    async def upload(request: Request) -> Response:
        try:
            owner = api.owner(request.headers.get("authorization"))
            form = await request.form(max_files=1)
            upload, purpose = form.get("file"), form.get("purpose")
            if purpose != "batch":
                raise ApiError(
                    400, "invalid_request_error", "invalid_purpose", "purpose must be 'batch'.", "purpose"
                )
            if not isinstance(upload, UploadFile):
                raise ApiError(
                    400, "invalid_request_error", "missing_file", "Upload the JSONL as 'file'.", "file"
                )
            content = await upload.read(MAX_FILE_BYTES + 1)
            if len(content) > MAX_FILE_BYTES:
                raise ApiError(
                    413, "invalid_request_error", "file_too_large", f"At most {MAX_FILE_BYTES} bytes."
                )
        except ApiError as error:
            return answer(error)
        stored = StoredFile(
            "file-" + new_record_id(),
            owner.tenant,
            owner.contract,
            "batch",
            upload.filename or "input.jsonl",
            time.time_ns(),
            content,
        )
        await run_in_threadpool(store.add_file, stored)
        return JSONResponse(stored.as_api())

    @app.get("/v1/files/{file_id}")
    async def file(file_id: str, request: Request) -> Response:
        try:
            owner = api.owner(request.headers.get("authorization"))
            found = _mine(owner, await run_in_threadpool(store.file, file_id), "file", file_id)
        except ApiError as error:
            return answer(error)
        return JSONResponse(found.as_api())

    @app.get("/v1/files/{file_id}/content")
    async def file_content(file_id: str, request: Request) -> Response:
        try:
            owner = api.owner(request.headers.get("authorization"))
            found = _mine(owner, await run_in_threadpool(store.file, file_id), "file", file_id)
        except ApiError as error:
            return answer(error)
        return Response(found.content, media_type="application/jsonl")

    @app.post("/v1/batches")
    async def create_batch(request: Request) -> Response:
        authorization = request.headers.get("authorization")
        try:
            owner = api.owner(authorization)
            body = _json_object(await request.body())
            endpoint, window = body.get("endpoint"), body.get("completion_window", "24h")
            if window not in COMPLETION_WINDOWS:
                raise ApiError(
                    400,
                    "invalid_request_error",
                    "invalid_completion_window",
                    "Use '24h'.",
                    "completion_window",
                )
            source = str(body.get("input_file_id"))
            found = _mine(owner, await run_in_threadpool(store.file, source), "file", source)
            if found.purpose != "batch":
                raise ApiError(
                    400,
                    "invalid_request_error",
                    "invalid_batch_input",
                    f"File '{source}' is a batch's {found.purpose}, not an input uploaded for a batch.",
                    "input_file_id",
                )
            try:
                lines = parse_batch_input(found.content, str(endpoint))
            except BatchInputError as bad:
                raise ApiError(
                    400, "invalid_request_error", "invalid_batch_input", str(bad), "input_file_id"
                ) from None
            metadata = body.get("metadata")
            batch = await run_in_threadpool(
                _start_batch, api, owner, str(endpoint), source, window, metadata, lines, authorization or ""
            )
        except ApiError as error:
            return answer(error)
        api.publisher.wake()
        return JSONResponse(batch_object(batch, store.of_batch(batch.id)))

    @app.get("/v1/batches/{batch_id}")
    async def batch(batch_id: str, request: Request) -> Response:
        try:
            owner = api.owner(request.headers.get("authorization"))
            found = _mine(owner, await run_in_threadpool(store.batch, batch_id), "batch", batch_id)
        except ApiError as error:
            return answer(error)
        return JSONResponse(await run_in_threadpool(_batch_now, store, found))


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_request_error", "invalid_json", "The body must be a JSON object.")
    return body


def _start_batch(
    api: JobsApi,
    owner: Entitlement,
    endpoint: str,
    source: str,
    window: str,
    metadata: Any,
    lines: list[Any],
    authorization: str,
) -> Batch:
    """Admit every line like an interactive request (a refusal is an error-file line and an unbilled
    ``rejected`` record) and queue the rest as the batch's jobs."""
    batch_id = "batch_" + new_record_id()
    refused: list[dict[str, Any]] = []
    admitted: list[tuple[Any, Routing]] = []
    for line in lines:
        try:
            admitted.append((line, api.service.admit(endpoint, authorization, line.body)))
        except ApiError as error:
            refused.append(
                refused_line(
                    line.custom_id, error.headers.get("x-request-id", ""), error.status, error.body()
                )
            )
    batch = Batch(
        batch_id,
        owner.tenant,
        owner.contract,
        endpoint,
        source,
        window,
        metadata if isinstance(metadata, dict) else None,
        time.time_ns(),
        refused,
    )
    api.store.add_batch(batch)
    for line, routing in admitted:
        api.runner.accept(routing, orjson.dumps(line.body), authorization, None, batch_id, line.custom_id)
    return batch


def _batch_now(store: JobStore, batch: Batch) -> dict[str, Any]:
    """The batch as it stands; the first look after its last job finished writes its result files."""
    jobs = store.of_batch(batch.id)
    if batch.completed_ns is None and all(job.finished for job in jobs):
        output, errors = result_files(batch, jobs)
        now = time.time_ns()
        store.complete_batch(
            batch.id,
            StoredFile(
                "file-" + new_record_id(),
                batch.tenant,
                batch.contract,
                "batch_output",
                f"{batch.id}_output.jsonl",
                now,
                output,
            ),
            StoredFile(
                "file-" + new_record_id(),
                batch.tenant,
                batch.contract,
                "batch_output",
                f"{batch.id}_error.jsonl",
                now,
                errors,
            ),
        )
        batch = store.batch(batch.id) or batch
    return batch_object(batch, jobs)
