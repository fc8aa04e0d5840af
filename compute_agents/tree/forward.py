"""L1 → L3: send one routed request to an executor, and to another when it failed before any output.

An attempt fails over (the breaker counts it) when the executor could not be reached, timed out before
answering, or answered 5xx: in each case the customer has received nothing yet. Each attempt has its own
record id, so a failed attempt's record and the served one never collide at ingest. Once an answer's
first byte is relayed there is no retry: a stream cut afterwards ends with an error event.

Billed once across attempts: an attempt that was sent and never answered (a timeout, a connection lost
after the request left) may still have run and committed an ``ok`` record at its executor. The next
attempt's signed decision names it in ``supersedes``, and a superseded record is never billed
(docs/record-format.md). An attempt that was never delivered (refused connection, connect timeout) or
that answered 5xx (an unbilled ``error`` record) needs no such claim. A decision names at most
``SUPERSEDES_MAX`` attempts, so a request stops failing over after that many unanswered ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import aiohttp
import structlog

from treemeter_records.validation import SUPERSEDES_MAX

from .registry import Executor, Registry

log = structlog.get_logger("compute_agents.tree")

RETRYABLE_STATUS = frozenset({500, 502, 503, 504})


class ExecutorClient:
    """The router's connections to its executors: one aiohttp session (keep-alive pool), opened in the
    serving loop on first use. aiohttp, not httpx, on this hop: relaying a small answer through a
    FastAPI app cost 0.3–0.6 ms with aiohttp against 2.0 ms with httpx (docs/agent.md, "The serving
    tree")."""

    def __init__(self, timeout_s: float, connect_s: float = 2.0) -> None:
        self.timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_s, sock_read=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self.timeout)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


@dataclass
class Attempt:
    executor: Executor
    record_id: str
    response: aiohttp.ClientResponse
    number: int  # 1 for the first executor tried

    async def read(self) -> bytes:
        """The whole answer (read by ``send`` already unless it streams)."""
        try:
            return await self.response.read()
        finally:
            self.response.release()


class NoExecutor(Exception):
    """Every healthy executor of the subtree failed, or there was none."""

    def __init__(self, tried: list[str], unanswered: list[str]) -> None:
        super().__init__(", ".join(tried) or "none")
        self.tried = tried
        self.unanswered = unanswered  # attempts sent and never answered: the refusal supersedes them


# (executor, earlier attempts that may have run) → (record id, headers to send)
SignFor = Callable[[Executor, tuple[str, ...]], tuple[str, dict[str, str]]]
# Transport errors: any of them fails the attempt over.
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)
# No answer in time (connect or read): what the subtree's breaker counts.
TIMEOUTS = (asyncio.TimeoutError, aiohttp.ServerTimeoutError)
# Those raised before the request could reach the executor (refused, unreachable, connect timeout).
UNDELIVERED = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


async def send(
    client: ExecutorClient,
    registry: Registry,
    subtree: str,
    model: str,
    route: str,
    body: bytes,
    sign_for: SignFor,
    *,
    stream: bool,
    superseded: tuple[str, ...] = (),
    affinity: Sequence[Sequence[int]] = (),
) -> Attempt:
    """The first attempt that answered, on the executors ``registry.choose`` picks (``affinity``: the
    experts the request's domain is predicted to use): a whole answer read, a stream's status and
    headers (its body still unread). The executor stays counted in flight until the caller calls
    ``registry.finished``/``released``."""
    tried: list[str] = []
    unanswered = list(superseded)  # attempts sent before this call (a job dispatched again)
    while len(unanswered) < SUPERSEDES_MAX and (executor := registry.choose(subtree, model, tried, affinity)):
        tried.append(executor.beat.executor)
        record_id, headers = sign_for(executor, tuple(unanswered))
        try:
            response = await _post(client, executor.beat.url + route, body, headers, stream)
        except TRANSPORT_ERRORS as error:
            log.warning("executor_unreachable", executor=executor.beat.executor, error=repr(error))
            registry.finished(executor, ok=False, timeout=isinstance(error, TIMEOUTS))
            if not isinstance(error, UNDELIVERED):
                unanswered.append(record_id)
            continue
        if response.status in RETRYABLE_STATUS:
            response.release()
            log.warning("executor_failed", executor=executor.beat.executor, status=response.status)
            registry.finished(executor, ok=False)
            continue
        return Attempt(executor, record_id, response, len(tried))
    raise NoExecutor(tried, unanswered)


async def _post(
    client: ExecutorClient, url: str, body: bytes, headers: dict[str, str], stream: bool
) -> aiohttp.ClientResponse:
    """A whole answer is read here, so that one cut short fails over like no answer at all."""
    response = await client.session.post(url, data=body, headers=headers)
    if stream:
        return response
    try:
        await response.read()
    except BaseException:
        response.close()
        raise
    return response


async def relay(attempt: Attempt, registry: Registry, on_cut: Callable[[], bytes]) -> AsyncIterator[bytes]:
    """A stream's bytes as they come; a cut after the first byte ends it with ``on_cut()``'s event.
    A client that leaves closes the executor's stream too (it cancels the generation)."""
    response, outcome = attempt.response, "gone"
    try:
        async for chunk in response.content.iter_any():
            yield chunk
        outcome = "ok"
    except TRANSPORT_ERRORS as error:
        log.warning("executor_stream_cut", executor=attempt.executor.beat.executor, error=repr(error))
        outcome = "cut"
        yield on_cut()
    finally:
        if outcome == "ok":
            response.release()
        else:
            response.close()
        if outcome == "gone":
            registry.released(attempt.executor)
        else:
            registry.finished(attempt.executor, ok=outcome == "ok")
