"""The router's side of the asynchronous path: accepting a queued request as a job (202), and running a
job when a worker dispatches it.

A dispatch re-authenticates the customer's key (a key revoked while its job waited fails the job),
keeps the admission's decision (domain, path, subtree), and sends the request like an interactive one
(failover, breakers), with two more claims in each attempt's decision: ``queued_us``, the time from
the router's receipt to this dispatch (the queue hop: the record still starts at the receipt), and
``supersedes``, every attempt of the job sent before (by an earlier dispatch too), so the job is billed
once however often it was dispatched. A job runs once per router process: a second dispatch of a job
in flight waits for the first, and a finished job is answered from the table.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi.concurrency import run_in_threadpool

from treemeter_records import new_record_id
from treemeter_records.validation import SUPERSEDES_MAX

from ..admission import authenticate
from ..jobs.callbacks import sign_callback
from ..jobs.store import Job, JobStore
from ..router import Decision
from ..wire import ApiError
from .forward import ExecutorClient, NoExecutor, send
from .preparation import EXPERTS_HEADER
from .service import RouterService, Routing

MAX_DISPATCHES = 5  # a job no executor could take this many times fails (an unbilled error record)


@dataclass(frozen=True)
class Dispatched:
    """What a dispatch request gets: 200 with the job (and its callback to deliver), or a status to
    retry later (503: no executor now; the job stays queued)."""

    status: int
    job: Job | None
    callback: dict[str, Any] | None = None

    def body(self) -> dict[str, Any]:
        return {"job": self.job.as_api() if self.job else None, "callback": self.callback}


class JobRunner:
    def __init__(self, service: RouterService, store: JobStore, client: ExecutorClient) -> None:
        self.service = service
        self.store = store
        self.client = client
        self._running: dict[str, asyncio.Future[None]] = {}

    def accept(
        self,
        routing: Routing,
        body: bytes,
        authorization: str,
        callback_url: str | None,
        batch_id: str | None = None,
        custom_id: str | None = None,
    ) -> Job:
        """Keep an admitted request as a job (on disk before the caller answers 202). Not a stream: the
        caller refuses ``stream: true`` (``stream_not_queued``)."""
        job_id = new_record_id()
        self.store.add(
            job_id,
            tenant=routing.entitlement.tenant,
            contract=routing.entitlement.contract,
            route=routing.route,
            body=body,
            authorization=authorization,
            decision={**routing.decision.as_json(), "model": routing.model},
            received_ns=routing.start_ns,
            callback_url=callback_url,
            batch_id=batch_id,
            custom_id=custom_id,
        )
        job = self.store.get(job_id)
        assert job is not None
        return job

    async def run(self, job_id: str) -> Dispatched:
        job = await run_in_threadpool(self.store.get, job_id)
        if job is None:
            return Dispatched(404, None)
        if not job.finished:
            waiting = self._running.get(job_id)
            if waiting is not None:
                await asyncio.shield(waiting)
            else:
                done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._running[job_id] = done
                try:
                    await self._dispatch(job)
                finally:
                    del self._running[job_id]
                    done.set_result(None)
            job = await run_in_threadpool(self.store.get, job_id)
            assert job is not None
        if not job.finished:
            return Dispatched(503, job)
        return Dispatched(200, job, self._callback(job))

    async def _dispatch(self, job: Job) -> None:
        mark, dispatched_ns = time.perf_counter_ns(), time.time_ns()
        number = await run_in_threadpool(self.store.start_dispatch, job.id)
        authorization = await run_in_threadpool(self.store.credential, job.id)
        try:
            entitlement = authenticate(self.service.spool, self.service.entitlements, authorization)
        except ApiError as error:  # the key was revoked (or the snapshot is stale: try again later)
            if error.status >= 500:
                return
            await self._finish(job, "failed", error.status, new_record_id(), orjson.dumps(error.body()))
            return
        saved = job.decision
        decision = Decision.from_json(saved)
        queued_us = max(1, (dispatched_ns - job.received_ns) // 1000)
        experts = self.service.experts.preheat(decision.domain)
        routing = self.service.fallback(
            Routing(
                job.route, entitlement, decision, saved["model"], job.received_ns, mark, queued_us, experts
            )
        )
        incoming = {"authorization": authorization or "", "content-type": "application/json"}

        def sign_for(executor: Any, supersedes: tuple[str, ...]) -> tuple[str, dict[str, str]]:
            record_id, headers = self.service.headers_for(routing, executor, incoming, supersedes)
            self.store.add_attempt(job.id, record_id)  # before it is sent: a crash keeps the id
            return record_id, headers

        try:
            attempt = await send(
                self.client,
                self.service.registry,
                routing.decision.subtree,
                routing.model,
                job.route,
                job.body,
                sign_for,
                stream=False,
                superseded=job.attempts[-SUPERSEDES_MAX:],
                affinity=routing.experts,
            )
        except NoExecutor as none:
            if number < MAX_DISPATCHES:
                return  # stays unfinished: the worker asks again later
            unserved = await run_in_threadpool(self.service.unserved, routing, none.tried, none.unanswered)
            await self._finish(
                job, "failed", 503, unserved.headers["x-request-id"], orjson.dumps(unserved.body())
            )
            return
        response = attempt.response
        content = await attempt.read()
        self.service.registry.finished(attempt.executor, ok=True)
        self.service.served(attempt.executor, attempt.number)
        if response.status == 200:
            self.service.learn(routing, response.headers.get(EXPERTS_HEADER))
        state = "succeeded" if response.status == 200 else "failed"
        await self._finish(job, state, response.status, attempt.record_id, content)

    async def _finish(self, job: Job, state: str, status: int, request_id: str, body: bytes) -> None:
        await run_in_threadpool(self.store.finish, job.id, state, status, request_id, body)

    def _callback(self, job: Job) -> dict[str, Any] | None:
        """The signed delivery of a finished job to its callback URL."""
        if not job.callback_url:
            return None
        body = orjson.dumps(job.as_api())
        return {
            "url": job.callback_url,
            "body": body.decode(),
            "headers": sign_callback(self.service.key, body),
        }
