"""The durable queue: a Celery app of its own (no Django, not the platform's) on the broker the router
and its workers are given (RabbitMQ or Redis in production; kombu's filesystem transport on a machine
with neither).

Messages carry a job id, where the router takes dispatch requests, and the router's signature of the
job id (so nobody else makes the router run a job). A worker acknowledges a message only when the router
answered the dispatch (``acks_late``): a worker that dies mid-job leaves its message unacknowledged and
the broker gives it to another worker. Dispatching one job twice is harmless: the router runs a job
once, joins a dispatch in flight and answers a finished job from its table (``tree.jobs``), and a
dispatch after a crash supersedes every attempt sent before, so the job is billed once.

The router publishes from its job table (an outbox): a job is on disk before its 202, and a broker
that is down delays publication without losing anything; publishing twice is as harmless.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from typing import Any

import httpx
import structlog
from celery import Celery, Task
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .callbacks import CallbackRefused, check_callback_url
from .store import JobStore

log = structlog.get_logger("compute_agents.jobs")

QUEUE = "treemeter-jobs"
RUN_TASK = "treemeter.jobs.run"
CALLBACK_TASK = "treemeter.jobs.callback"
TOKEN_DOMAIN = b"treemeter-job-v1\n"
TOKEN_HEADER = "x-treemeter-job-token"  # noqa: S105 - a header name
RUN_TIMEOUT_S = 600.0  # one dispatch: the executor's whole answer
# The router is busy, has no executor now, or failed mid-dispatch (its job table keeps the attempts).
RETRY_STATUS = frozenset({409, 429, 500, 502, 503, 504})
CALLBACK_RETRIES = 12
VISIBILITY_TIMEOUT_S = 900.0


def job_token(key: Ed25519PrivateKey, job_id: str) -> str:
    return base64.b64encode(key.sign(TOKEN_DOMAIN + job_id.encode())).decode()


def token_valid(public_key: Ed25519PublicKey, job_id: str, token: str) -> bool:
    try:
        public_key.verify(base64.b64decode(token, validate=True), TOKEN_DOMAIN + job_id.encode())
    except (InvalidSignature, ValueError):
        return False
    return True


def backoff_s(retries: int) -> float:
    """1, 2, 4 … capped at 30 s between tries."""
    return float(min(30, 2**retries))


def job_queue(
    broker_url: str,
    queue: str = QUEUE,
    visibility_timeout_s: float = VISIBILITY_TIMEOUT_S,
    *,
    private_callbacks: bool = False,
) -> Celery:
    """The Celery app of the job queue ``queue`` on ``broker_url``, with its two tasks;
    ``private_callbacks`` lets callbacks reach addresses inside the network (tests, closed setups)."""
    app = Celery("treemeter_jobs", broker=broker_url, set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        task_acks_late=True,
        task_reject_on_worker_lost=True,  # a worker killed mid-job: the message goes back to the queue
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        # Redis: an unacknowledged message returns after this long (RabbitMQ returns it on disconnect).
        # A job still running then is dispatched twice, which the router joins (see the module doc).
        broker_transport_options={"visibility_timeout": visibility_timeout_s},
        worker_hijack_root_logger=False,
        treemeter_private_callbacks=private_callbacks,
    )
    app.task(name=RUN_TASK, bind=True, max_retries=None)(run_job)
    app.task(name=CALLBACK_TASK, bind=True, max_retries=CALLBACK_RETRIES)(deliver_callback)
    return app


def run_job(task: Task, job_id: str, router_url: str, token: str) -> str:
    """Ask the router to dispatch the job and wait for its answer; retried (never dropped) while the
    router is unreachable or has no executor; then the job's callback, if it has one, is queued."""
    try:
        response = httpx.post(
            f"{router_url}/tree/jobs/{job_id}/run", headers={TOKEN_HEADER: token}, timeout=RUN_TIMEOUT_S
        )
    except httpx.TransportError as error:
        log.warning("job_router_unreachable", job=job_id, error=repr(error))
        raise task.retry(countdown=backoff_s(task.request.retries)) from error
    if response.status_code in RETRY_STATUS:
        log.info("job_not_dispatched", job=job_id, status=response.status_code)
        raise task.retry(countdown=backoff_s(task.request.retries))
    if response.status_code != 200:  # not a job of this router, or a forged token: nothing to do
        log.error("job_refused", job=job_id, status=response.status_code, body=response.text[:200])
        return "refused"
    answer: dict[str, Any] = response.json()
    callback = answer.get("callback")
    if callback:
        task.app.send_task(
            CALLBACK_TASK,
            args=[callback["url"], callback["body"], callback["headers"]],
            queue=task.app.conf.task_default_queue,
        )
    return str(answer["job"]["status"])


def deliver_callback(task: Task, url: str, body: str, headers: dict[str, str]) -> int:
    """POST the router's signed callback; retried with backoff until the receiver answers 2xx. A URL
    that resolves inside the network is not called (logged as ``callback_refused``)."""
    try:
        check_callback_url(url, allow_private=task.app.conf.treemeter_private_callbacks, resolve=True)
    except CallbackRefused as refused:
        log.error("callback_refused", url=url, reason=str(refused))
        return 0
    try:
        response = httpx.post(url, content=body.encode(), headers=headers, timeout=30.0)
    except httpx.TransportError as error:
        raise task.retry(countdown=backoff_s(task.request.retries)) from error
    if not 200 <= response.status_code < 300:
        raise task.retry(countdown=backoff_s(task.request.retries))
    return response.status_code


class Publisher:
    """The router's outbox: publishes each job of the table not yet published, in order, and marks it.
    Runs in a thread; a broker that refuses is retried every ``interval_s``."""

    def __init__(
        self,
        app: Celery,
        store: JobStore,
        router_url: str,
        token_for: Callable[[str], str],
        interval_s: float = 0.2,
    ) -> None:
        self.app = app
        self.store = store
        self.router_url = router_url
        self.token_for = token_for
        self.interval_s = interval_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="job-publisher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)

    def wake(self) -> None:
        self._wake.set()

    def publish_pending(self) -> int:
        """Publish what is pending now; how many were published."""
        published = 0
        for job_id in self.store.unpublished():
            self.app.send_task(
                RUN_TASK,
                args=[job_id, self.router_url, self.token_for(job_id)],
                queue=self.app.conf.task_default_queue,
            )
            self.store.published(job_id)
            published += 1
        return published

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.publish_pending()
            except Exception as error:  # a broker down: keep the jobs, try again
                log.warning("job_publish_failed", error=repr(error))
            self._wake.wait(self.interval_s)
            self._wake.clear()
