"""An executor's heartbeat to its L1 router: who it is, where it listens, its subtree and model, how
many requests it takes at once and has outstanding, and which experts it holds resident. Signed with
the executor's agent key (the agent-request scheme of ``treemeter_records.protocol``), sent every
``interval_s``; a router that misses a few stops choosing it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from treemeter_records import protocol

HEARTBEAT_PATH = "/tree/heartbeat"

log = structlog.get_logger("compute_agents.tree.heartbeat")


@dataclass(frozen=True)
class ExecutorCard:
    executor: str
    url: str  # where the router reaches this executor
    subtree: str
    model_id: str
    weights_sha3: str
    served_names: tuple[str, ...]
    capacity: int = 1  # requests it serves at once (its load is outstanding ÷ capacity)


class HeartbeatSender:
    def __init__(
        self,
        router_url: str,
        card: ExecutorCard,
        key: Ed25519PrivateKey,
        outstanding: Callable[[], int],
        resident: Callable[[], dict[int, list[int]]],
        *,
        interval_s: float = 0.5,
    ) -> None:
        self.router_url = router_url.rstrip("/")
        self.card = card
        self.key = key
        self.outstanding = outstanding
        self.resident = resident
        self.interval_s = interval_s
        self.http = httpx.Client(timeout=2.0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def body(self) -> dict[str, Any]:
        card = self.card
        return {
            "executor": card.executor,
            "url": card.url,
            "subtree": card.subtree,
            "model_id": card.model_id,
            "weights_sha3": card.weights_sha3,
            "served_names": list(card.served_names),
            "capacity": card.capacity,
            "outstanding": self.outstanding(),
            "resident": {str(layer): experts for layer, experts in self.resident().items()},
        }

    def beat(self) -> bool:
        """One heartbeat; False when the router did not take it (it is retried next interval)."""
        raw = orjson.dumps(self.body())
        headers = protocol.signed_headers(self.key, self.card.executor, "POST", HEARTBEAT_PATH, raw)
        headers["content-type"] = "application/json"
        try:
            answer = self.http.post(self.router_url + HEARTBEAT_PATH, content=raw, headers=headers)
        except httpx.HTTPError as error:
            log.info("heartbeat_unsent", router=self.router_url, error=repr(error))
            return False
        if answer.status_code != 200:
            log.warning(
                "heartbeat_refused", router=self.router_url, status=answer.status_code, body=answer.text
            )
        return answer.status_code == 200

    def _run(self) -> None:
        while not self._stop.is_set():
            self.beat()
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.http.close()
