"""L1 → L3: send one routed request to an executor, and to another when it failed before any output.

An attempt fails over (the breaker counts it) when the executor could not be reached, timed out before
answering, or answered 5xx: in each case the customer has received nothing yet, and the executor left
no billed record (a 5xx leaves an unbilled ``error`` record under that attempt's id). Each attempt has
its own record id, so a failed attempt's record and the served one never collide at ingest. Once an
answer's first byte is relayed there is no retry: a stream cut afterwards ends with an error event.

The one case where two attempts could both bill: an executor that committed its ``ok`` record and died
before its answer's first byte left it. The window is the spool commit to the first write (the record is
committed just before the answer goes out); the chaos tests measure how often it happens.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
import structlog

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

    def __init__(self, tried: list[str]) -> None:
        super().__init__(", ".join(tried) or "none")
        self.tried = tried


SignFor = Callable[[Executor], tuple[str, dict[str, str]]]  # executor → (record id, headers to send)


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
) -> Attempt:
    """The first attempt that answered (its response's headers read; a stream's body still unread).
    The executor stays counted in flight until the caller calls ``registry.finished``/``released``."""
    tried: list[str] = []
    while (executor := registry.choose(subtree, model, exclude=tried)) is not None:
        tried.append(executor.beat.executor)
        record_id, headers = sign_for(executor)
        request = client.build_request("POST", executor.beat.url + route, content=body, headers=headers)
        try:
            response = await client.send(request, stream=stream)
        except httpx.TransportError as error:
            log.warning("executor_unreachable", executor=executor.beat.executor, error=repr(error))
            registry.finished(executor, ok=False)
            continue
        if response.status_code in RETRYABLE_STATUS:
            await response.aread()
            await response.aclose()
            log.warning("executor_failed", executor=executor.beat.executor, status=response.status_code)
            registry.finished(executor, ok=False)
            continue
        return Attempt(executor, record_id, response, len(tried))
    raise NoExecutor(tried)


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
