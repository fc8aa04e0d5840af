"""A real agent's API on uvicorn (a real socket: the official SDK connects, streams and hangs up), and
its spooled records by id, for the tests that drive the agent with the ``openai`` package."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import orjson
import uvicorn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from compute_agents.app import create_app
from compute_agents.engine import Engine
from compute_agents.service import AgentService
from compute_agents.spool import Spool
from compute_agents.tree.app import create_router_app
from compute_agents.tree.forward import ExecutorClient
from compute_agents.tree.heartbeat import ExecutorCard, HeartbeatSender
from compute_agents.tree.service import RouterService


@contextmanager
def serving(service: AgentService) -> Iterator[str]:
    """The agent's API on a free local port; yields its base URL (``…/v1``)."""
    with serving_app(create_app(service)) as root:
        yield root + "/v1"


@contextmanager
def serving_app(app: Any, port: int = 0) -> Iterator[str]:
    """An ASGI app on uvicorn on a local port (0: a free one); yields its root URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="api", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the agent's API did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]  # the one bound
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def behind_router(
    router: RouterService,
    executor: AgentService,
    executor_id: str,
    executor_key: Ed25519PrivateKey,
    engine: Engine,
) -> Iterator[tuple[str, str]]:
    """The router and one executor on real sockets, the executor heartbeating to it (subtree `default`)
    until the router finds it healthy; yields the router's root URL and the executor's (`…/v1`)."""
    with (
        serving_app(create_router_app(router, ExecutorClient(60))) as router_url,
        serving(executor) as executor_url,
    ):
        card = ExecutorCard(
            executor_id,
            executor_url.removesuffix("/v1"),
            "default",
            engine.model_id,
            engine.weights_sha3,
            engine.served_names,
        )
        beats = HeartbeatSender(
            router_url,
            card,
            executor_key,
            lambda: executor.outstanding,
            engine.resident_experts,
            interval_s=0.2,
        )
        beats.start()
        try:
            deadline = time.monotonic() + 30
            while not router.registry.healthy("default", "tiny"):
                assert time.monotonic() < deadline, "no heartbeat reached the router"
                time.sleep(0.05)
            yield router_url, executor_url
        finally:
            beats.stop()


class Spooling(Protocol):
    """An agent or a router: whatever commits records to a spool."""

    spool: Spool


def records(service: Spooling) -> list[dict[str, Any]]:
    return [orjson.loads(body) for _, _, body in service.spool.pending(10_000)]


def record(service: Spooling, record_id: str, wait_s: float = 30) -> dict[str, Any]:
    """The spooled record with this id, waiting for it (a stream's is committed by its own thread)."""
    deadline = time.monotonic() + wait_s
    while True:
        found = [r for r in records(service) if r["record_id"] == record_id]
        if found or time.monotonic() > deadline:
            assert found, f"no record {record_id}"
            return found[0]
        time.sleep(0.05)
