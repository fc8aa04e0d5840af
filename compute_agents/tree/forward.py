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

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
import structlog

from treemeter_records.validation import SUPERSEDES_MAX

from .registry import Executor, Registry

log = structlog.get_logger("compute_agents.tree")

RETRYABLE_STATUS = frozenset({500, 502, 503, 504})


@dataclass
class Attempt:
    executor: Executor
    record_id: str
    response: httpx.Response
    number: int  # 1 for the first executor tried


class NoExecutor(Exception):
    """Every healthy executor of the subtree failed, or there was none."""

    def __init__(self, tried: list[str], unanswered: list[str]) -> None:
        super().__init__(", ".join(tried) or "none")
        self.tried = tried
        self.unanswered = unanswered  # attempts sent and never answered: the refusal supersedes them


# (executor, earlier attempts that may have run) → (record id, headers to send)
SignFor = Callable[[Executor, tuple[str, ...]], tuple[str, dict[str, str]]]
# Transport errors raised before the request could reach the executor.
UNDELIVERED = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


async def send(
    client: httpx.AsyncClient,
    registry: Registry,
    subtree: str,
    model: str,
    route: str,
    body: bytes,
    sign_for: SignFor,
    *,
    stream: bool,
    superseded: tuple[str, ...] = (),
) -> Attempt:
    """The first attempt that answered (its response's headers read; a stream's body still unread).
    The executor stays counted in flight until the caller calls ``registry.finished``/``released``."""
    tried: list[str] = []
    unanswered = list(superseded)  # attempts sent before this call (a job dispatched again)
    while len(unanswered) < SUPERSEDES_MAX and (executor := registry.choose(subtree, model, exclude=tried)):
        tried.append(executor.beat.executor)
        record_id, headers = sign_for(executor, tuple(unanswered))
        request = client.build_request("POST", executor.beat.url + route, content=body, headers=headers)
        try:
            response = await client.send(request, stream=stream)
        except httpx.TransportError as error:
            log.warning("executor_unreachable", executor=executor.beat.executor, error=repr(error))
            registry.finished(executor, ok=False)
            if not isinstance(error, UNDELIVERED):
                unanswered.append(record_id)
            continue
        if response.status_code in RETRYABLE_STATUS:
            await response.aread()
            await response.aclose()
            log.warning("executor_failed", executor=executor.beat.executor, status=response.status_code)
            registry.finished(executor, ok=False)
            continue
        return Attempt(executor, record_id, response, len(tried))
    raise NoExecutor(tried, unanswered)


async def relay(attempt: Attempt, registry: Registry, on_cut: Callable[[], bytes]) -> AsyncIterator[bytes]:
    """A stream's bytes as they come; a cut after the first byte ends it with ``on_cut()``'s event.
    A client that leaves closes the executor's stream too (it cancels the generation)."""
    response, outcome = attempt.response, "gone"
    try:
        async for chunk in response.aiter_raw():
            yield chunk
        outcome = "ok"
    except httpx.TransportError as error:
        log.warning("executor_stream_cut", executor=attempt.executor.beat.executor, error=repr(error))
        outcome = "cut"
        yield on_cut()
    finally:
        await response.aclose()
        if outcome == "gone":
            registry.released(attempt.executor)
        else:
            registry.finished(attempt.executor, ok=outcome == "ok")
