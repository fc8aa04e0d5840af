"""The serving tree as real processes (`router` and two `serve --router-url`) under failures, loopback
only: an executor killed with SIGKILL, the router killed and restarted, the platform unreachable. Each
scenario asserts the same four things on the records that reach the platform (v2 records, whose
router and executor signatures ingest checks):

1. every answered request has exactly one billed record, and it is the answer's own (x-request-id);
2. no unanswered request is billed, and an answered one only for its answer: an attempt that was sent
   and never answered (it may have run) is superseded by its retry's signed decision, or, when the
   router died with it in flight, by the record the restarted router writes for it; neither is billed;
3. no sequence gap is left: every seq each agent produced reached the platform;
4. traffic moves to what is healthy within a bounded number of failures.
"""

from __future__ import annotations

import copy
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agents.services import register_agent
from clickhouse_store import query
from clickhouse_store.queries.billing import superseded_attempts
from compute_agents.default_rules import DEFAULT_RULES
from compute_agents.runtime import pin_platform_key
from compute_agents.tree.registry import BREAKER_FAILURES
from entitlements.services import issue_api_key
from ingest.models import RejectedRecord, SequenceGap
from scheduling.models import SchedulerEvent as SchedulerEventRow
from tests.compute_agents.agent_harness import register_publisher
from tests.compute_agents.test_tree_serving import free_port
from tests.factories import ContractFactory
from treemeter_records import private_key_from_seed, public_key_to_b64

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db(transaction=True)]

SENDERS = 2
EXECUTORS = ("exec-a", "exec-b")


def agent_command(data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "compute_agents", "--key-file", str(data_dir / "agent.key"), *args]


def wait_for(check: Callable[[], bool], what: str, processes: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in processes), f"a process exited while waiting for {what}"
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class Outage:
    """A TCP proxy in front of a service: ``down()`` refuses new connections and cuts open ones, as a
    service that is gone would; ``stall()`` keeps every connection open and forwards nothing, as a
    partitioned network would; ``up()`` forwards again, on the same port."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.stalled = threading.Event()
        self.muted = threading.Event()
        self.up()

    def stall(self) -> None:
        self.stalled.set()

    def mute(self) -> None:
        """Requests still reach the upstream; its answers are dropped (a one-way partition)."""
        self.muted.set()

    def up(self) -> None:
        self.stalled.clear()
        listener = socket.create_server(("127.0.0.1", self.port), reuse_port=True)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        with self._lock:
            assert self._listener is not None
            self._listener.close()
            for sock in self._open:
                sock.close()
            self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed: down()
            upstream = socket.create_connection(self.upstream)
            with self._lock:
                self._open += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()

    def _pipe(self, client: socket.socket, upstream: socket.socket) -> None:
        peers = {client: upstream, upstream: client}
        try:
            while True:
                if self.stalled.is_set():  # nothing passes; the connection stays open
                    time.sleep(0.05)
                    continue
                readable, _, _ = select.select(list(peers), [], [], 0.2)
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is upstream and self.muted.is_set():
                        continue  # the answer is lost on the way back
                    peers[sock].sendall(data)
        except (OSError, ValueError):  # cut by down(): closed sockets
            return
        finally:
            client.close()
            upstream.close()


@dataclass
class Tree:
    """A router and two executors as processes, registered on the platform, and the customer's load."""

    root: Path
    platform_url: str  # as the processes reach it (maybe through an Outage)
    contract: Any
    api_key: str
    keys: dict[str, str] = field(default_factory=dict)  # agent id → public key
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    router_port: int = field(default_factory=free_port)
    answers: dict[str, httpx.Response] = field(default_factory=dict)
    unanswered: dict[str, str] = field(default_factory=dict)  # request id → what the client saw
    answered_at: list[tuple[float, int]] = field(default_factory=list)  # (monotonic time, status)
    extra_contracts: list[str] = field(default_factory=list)  # bound too, beside ``contract``

    @property
    def router_url(self) -> str:
        return f"http://127.0.0.1:{self.router_port}"

    def register(self, name: str, registration_url: str, kind: str = "executor") -> None:
        directory = self.root / name
        directory.mkdir(parents=True)
        seed = os.urandom(32)
        (directory / "agent.key").write_bytes(seed)
        self.keys[name] = public_key_to_b64(private_key_from_seed(seed))
        codes = [self.contract.code, *self.extra_contracts]
        register_agent(
            agent_id=name, public_key_b64=self.keys[name], tenant_codes=[], contract_codes=codes, kind=kind
        )
        pin_platform_key(registration_url, directory)

    def start_router(self, executor_timeout_s: float = 30, *extra: str) -> None:
        trusted = [
            arg
            for name in EXECUTORS
            if name in self.keys
            for arg in ("--executor", f"{name}={self.keys[name]}")
        ]
        directory = self.root / "router-1"
        self.processes["router-1"] = self._spawn(
            directory,
            *("router", "--platform-url", self.platform_url, "--agent-id", "router-1"),
            *("--data-dir", str(directory), "--port", str(self.router_port), *trusted),
            *("--executor-timeout", str(executor_timeout_s), *extra),
        )

    def start_executor(
        self, name: str, model: Path, port: int = 0, advertised: str = "", subtree: str = "default"
    ) -> None:
        """An executor; with ``advertised`` (a proxy's URL) the router reaches it there (its heartbeats
        still go straight to the router)."""
        register_publisher(model)
        directory = self.root / name
        port = port or free_port()
        advertised = advertised or f"http://127.0.0.1:{port}"
        self.processes[name] = self._spawn(
            directory,
            *("serve", "--platform-url", self.platform_url, "--agent-id", name, "--data-dir", str(directory)),
            *("--model-dir", str(model), "--port", str(port), "--threads", "1"),
            *("--router-url", self.router_url, "--router-key", self.keys["router-1"]),
            *("--advertise-url", advertised, "--batch-size", "5", "--batch-age", "0.1"),
            *("--subtree", subtree),
        )

    def _spawn(self, directory: Path, *args: str) -> subprocess.Popen[bytes]:
        command = agent_command(directory, *args)
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def healthy(self, count: int = len(EXECUTORS)) -> None:
        def ready() -> bool:
            listed = httpx.get(self.router_url + "/tree/executors", timeout=2).json()["executors"]
            return sum(e["healthy"] for e in listed) >= count

        wait_for(ready, "the executors' heartbeats", list(self.processes.values()))

    def kill(self, name: str) -> float:
        self.processes[name].send_signal(signal.SIGKILL)
        self.processes[name].wait()
        return time.monotonic()

    def ask(self, request_id: str, prompt: str, max_tokens: int = 4, temperature: float = 1.0) -> bool:
        """One customer request through the router, kept as answered or not; whether it was answered.
        Temperature 0 for a request that must run its whole length (sampled, the tiny model may stop
        early: 8 of 20 sampled answers of "a long contract" ended before 400 tokens)."""
        body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature}
        headers = {"authorization": f"Bearer {self.api_key}", "x-request-id": request_id}
        try:
            answer = httpx.post(self.router_url + "/v1/completions", json=body, headers=headers, timeout=30)
        except httpx.HTTPError as error:
            self.unanswered[request_id] = repr(error)
            return False
        self.answered_at.append((time.monotonic(), answer.status_code))
        if answer.status_code == 200:
            self.answers[request_id] = answer
            return True
        self.unanswered[request_id] = f"HTTP {answer.status_code}"
        return False

    @contextmanager
    def load(self) -> Iterator[None]:
        """Customers sending through the router from SENDERS threads while the block runs."""
        stop = threading.Event()

        def send(sender: int) -> None:
            number = 0
            while not stop.is_set():
                number += 1
                if not self.ask(f"s{sender}-{number}", f"contract clause {number}"):
                    time.sleep(0.05)

        senders = [threading.Thread(target=send, args=(i,)) for i in range(SENDERS)]
        for thread in senders:
            thread.start()
        try:
            yield
        finally:
            stop.set()
            for thread in senders:
                thread.join()

    def stop_and_drain(self, platform_url: str) -> None:
        """Stop every process, then ship what each spool still holds (as each one's restart would)."""
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for name in [n for n in ("router-1", *EXECUTORS) if n in self.keys]:
            directory = self.root / name
            command = (
                "ship",
                "--platform-url",
                platform_url,
                "--agent-id",
                name,
                "--data-dir",
                str(directory),
            )
            shipped = subprocess.run(agent_command(directory, *command), capture_output=True, timeout=120)
            assert shipped.returncode == 0, shipped.stderr

    def check_billing(self) -> dict[str, int]:
        """Assertions 1–3 of the module docstring; returns the figures."""
        assert not RejectedRecord.objects.exists(), list(RejectedRecord.objects.values("code", "field"))
        rows = query.select(f"SELECT client_request_id, toString(record_id), status FROM {query.RECORDS}")
        # Billed as rating bills: ok, and no retry's decision superseded it (billing.exclusions)
        now = datetime.now(UTC)
        superseded = {
            a.record_id for a in superseded_attempts([self.contract.code], now - timedelta(days=1), now)
        }
        billed: dict[str, list[str]] = {}
        unbilled: dict[str, list[str]] = {}
        for client_request_id, record_id, status in rows:
            is_billed = status == "ok" and record_id not in superseded
            (billed if is_billed else unbilled).setdefault(client_request_id, []).append(record_id)
        doubled = []  # answered, but an abandoned attempt of it was billed too
        for request_id, answer in self.answers.items():
            assert answer.headers["x-request-id"] in billed.get(request_id, []), request_id
            if len(billed[request_id]) > 1:
                doubled.append(request_id)
        billed_unanswered = [r for r in self.unanswered if r in billed]
        assert not doubled and not billed_unanswered, (doubled, billed_unanswered)
        assert not SequenceGap.objects.filter(closed_at=None).exists()
        return {
            "answered": len(self.answers),
            "unanswered": len(self.unanswered),
            "answered_billed_twice": len(doubled),
            "unanswered_billed": len(billed_unanswered),
            "superseded": len(superseded),
        }


@pytest.fixture
def tree(tmp_path: Path, live_server: Any) -> Iterator[Tree]:
    contract = ContractFactory.create()
    made = Tree(tmp_path, live_server.url, contract, issue_api_key(contract_code=contract.code).secret)
    yield made
    for process in made.processes.values():
        if process.poll() is None:
            process.kill()
            process.wait()


def start(tree: Tree, tiny_model: Path, registration_url: str) -> None:
    tree.register("router-1", registration_url, kind="router")
    for name in EXECUTORS:
        tree.register(name, registration_url)
    tree.start_router()
    for name in EXECUTORS:
        tree.start_executor(name, tiny_model)
    tree.healthy()


def test_sigkill_of_an_executor_under_load(tree: Tree, tiny_model: Path, live_server: Any) -> None:
    start(tree, tiny_model, live_server.url)
    with tree.load():
        time.sleep(3)
        killed_at = tree.kill("exec-a")
        time.sleep(3)
    stats = httpx.get(tree.router_url + "/tree/stats", timeout=5).json()
    tree.stop_and_drain(live_server.url)
    figures = tree.check_billing()
    assert not tree.unanswered  # the router failed over every request the dead executor did not answer
    assert stats["by_executor"].get("exec-a", 0) > 0 and stats["by_executor"].get("exec-b", 0) > 0
    assert stats["failovers"] <= BREAKER_FAILURES + SENDERS  # then its breaker is open
    after = [status for at, status in tree.answered_at if at > killed_at]
    assert after and set(after) == {200}
    print(f"executor SIGKILL: {figures}, failovers {stats['failovers']}")


def test_the_router_killed_and_restarted(tree: Tree, tiny_model: Path, live_server: Any) -> None:
    start(tree, tiny_model, live_server.url)
    with tree.load():
        time.sleep(2)
        # A long request, surely at an executor when the router dies: whether that executor finishes
        # it (ok, then superseded by the restarted router's record) or sees its caller go (cancelled),
        # it is billed to nobody.
        # greedy, "a long contract" runs all 512 tokens (0.9 s alone, longer under this load)
        doomed = threading.Thread(target=tree.ask, args=("doomed", "a long contract", 512, 0.0))
        doomed.start()
        time.sleep(0.5)
        killed_at = tree.kill("router-1")
        doomed.join()
        time.sleep(1)
        tree.start_router()  # same port, same data dir: its spool, key and in-flight ledger carry over
        tree.healthy()
        restarted_at = time.monotonic()
        time.sleep(2)
    tree.stop_and_drain(live_server.url)
    figures = tree.check_billing()
    assert "doomed" in tree.unanswered
    [(doomed_status,)] = query.select(
        f"SELECT status FROM {query.RECORDS} WHERE client_request_id = 'doomed'"
    )
    assert any(at > restarted_at and status == 200 for at, status in tree.answered_at)
    assert all(status == 200 for at, status in tree.answered_at if at < killed_at)
    print(f"router SIGKILL and restart: {figures}, the long request's record: {doomed_status}")


def test_the_platform_unreachable_then_back(tree: Tree, tiny_model: Path, live_server: Any) -> None:
    outage = Outage(live_server.url)
    tree.platform_url = outage.url
    start(tree, tiny_model, live_server.url)
    with tree.load():
        time.sleep(2)
        outage.down()  # serving goes on from the signed snapshot; records wait in the spools
        down_at = time.monotonic()
        time.sleep(8)
        up_at = time.monotonic()
        outage.up()
        time.sleep(2)
    tree.stop_and_drain(live_server.url)
    figures = tree.check_billing()
    assert not tree.unanswered
    assert sum(down_at < at < up_at for at, _ in tree.answered_at) > 0
    print(f"platform down 8 s: {figures}")


def test_an_executor_cut_off_by_a_stalled_network(tree: Tree, tiny_model: Path, live_server: Any) -> None:
    """exec-a's requests pass through a proxy that stops forwarding (connections stay open): each one
    times out at the router (2 s), its breaker opens after three, and traffic goes to exec-b."""
    port = free_port()
    proxy = Outage(f"http://127.0.0.1:{port}")  # in front of exec-a, which will listen on ``port``
    tree.register("router-1", live_server.url, kind="router")
    for name in EXECUTORS:
        tree.register(name, live_server.url)
    tree.start_router(executor_timeout_s=2)
    tree.start_executor("exec-a", tiny_model, port=port, advertised=proxy.url)
    tree.start_executor("exec-b", tiny_model)
    tree.healthy()
    with tree.load():
        time.sleep(2)
        proxy.stall()
        stalled_at = time.monotonic()
        time.sleep(12)
    stats = httpx.get(tree.router_url + "/tree/stats", timeout=5).json()
    breaker = {
        e["executor"]: e["breaker"]
        for e in httpx.get(tree.router_url + "/tree/executors").json()["executors"]
    }
    tree.stop_and_drain(live_server.url)
    # Nothing died: an attempt that timed out and may have run is superseded by its retry, so no
    # request is billed twice.
    figures = tree.check_billing()
    assert not tree.unanswered  # every timed-out attempt was retried on exec-b
    assert figures["superseded"] >= BREAKER_FAILURES  # each timed-out attempt, named by its retry
    assert breaker["exec-a"] != "closed" and stats["failovers"] >= BREAKER_FAILURES
    late = [status for at, status in tree.answered_at if at > stalled_at + 3 * 2 + 2]
    assert late and set(late) == {200}  # once the breaker is open, no request waits on exec-a
    print(f"executor cut off: {figures}, failovers {stats['failovers']}")


def test_an_answer_lost_on_the_way_back_with_no_other_executor(
    tree: Tree, tiny_model: Path, live_server: Any
) -> None:
    """exec-a alone, behind a proxy that forwards requests and drops answers: each request runs and
    exec-a commits an ok record, the router times out and has nobody else, and the customer gets a 503.
    The router's error record is signed as v2 and supersedes the attempt: nothing is billed."""
    port = free_port()
    proxy = Outage(f"http://127.0.0.1:{port}")
    tree.register("router-1", live_server.url, kind="router")
    tree.register("exec-a", live_server.url)
    # 5 s before the router gives up: time enough, on a loaded machine, for the proxy to forward and
    # exec-a to run and commit (the answer it then sends is dropped).
    tree.start_router(5)
    tree.start_executor("exec-a", tiny_model, port=port, advertised=proxy.url)
    tree.healthy(1)
    proxy.mute()
    headers = {"authorization": f"Bearer {tree.api_key}"}
    body = {"model": "tiny", "prompt": "contract clause", "max_tokens": 4}
    answer = httpx.post(tree.router_url + "/v1/completions", json=body, headers=headers, timeout=30)
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "no_executor"
    tree.stop_and_drain(live_server.url)

    rows = query.select(
        f"SELECT toString(record_id), agent_id, status, decision != '' FROM {query.RECORDS} ORDER BY agent_id"
    )
    now = datetime.now(UTC)
    superseded = {
        a.record_id for a in superseded_attempts([tree.contract.code], now - timedelta(days=1), now)
    }
    [(ran_id, _, ran_status, _)] = [row for row in rows if row[1] == "exec-a"]
    [(refusal_id, _, refusal_status, refusal_is_v2)] = [row for row in rows if row[1] == "router-1"]
    assert ran_status == "ok" and ran_id in superseded  # it ran, its answer was lost: not billed
    assert (refusal_status, refusal_is_v2, refusal_id) == ("error", True, answer.headers["x-request-id"])
    assert not RejectedRecord.objects.exists()  # ingest verified the router's own v2 record


FALLBACK_CONFIG = """\
version: 1
subtrees:
  main:
    kind: inference
    executors: [exec-a]
    sla: {p99_ms: 300, max_concurrency: 8}
    fallback: cpu
  cpu:
    kind: inference
    executors: [exec-b]
    sla: {p99_ms: 2000, max_concurrency: 8}
"""


def test_a_subtree_that_times_out_falls_back_and_a_probe_brings_it_back(
    tree: Tree, tiny_model: Path, live_server: Any
) -> None:
    """Every request goes to subtree main (exec-a, behind a proxy); cpu (exec-b) is its fallback. With
    the proxy stalled, 3 requests time out (1 s each; main has nobody else: 503, unbilled); then the
    subtree's breaker sends requests to cpu, each record's decision naming ``fallback_from: main``.
    Once the network is back and the cooldown over, one probe to main succeeds and main serves again."""
    rules = copy.deepcopy(DEFAULT_RULES)
    for row in rules["policy"]:
        row["subtree"] = "main"
    (tree.root / "rules.json").write_text(json.dumps(rules))
    (tree.root / "tree-config.yaml").write_text(FALLBACK_CONFIG)
    port = free_port()
    proxy = Outage(f"http://127.0.0.1:{port}")
    tree.register("router-1", live_server.url, kind="router")
    for name in EXECUTORS:
        tree.register(name, live_server.url)
    tree.start_router(
        1, "--rules", str(tree.root / "rules.json"), "--tree-config", str(tree.root / "tree-config.yaml")
    )
    tree.start_executor("exec-a", tiny_model, port=port, advertised=proxy.url, subtree="main")
    tree.start_executor("exec-b", tiny_model, subtree="cpu")
    tree.healthy()
    assert tree.ask("warm", "contract clause")  # main answers
    proxy.stall()
    timed_out = [tree.ask(f"timeout-{n}", "contract clause") for n in range(3)]
    fallen = [tree.ask(f"fallback-{n}", "contract clause") for n in range(3)]
    stats = httpx.get(tree.router_url + "/tree/stats", timeout=5).json()
    proxy.stalled.clear()
    time.sleep(2.5)  # the breakers' cooldown (2 s): the next request probes main
    assert tree.ask("probe", "contract clause")
    assert tree.ask("back", "contract clause")
    tree.stop_and_drain(live_server.url)
    figures = tree.check_billing()
    assert timed_out == [False] * 3 and fallen == [True] * 3
    assert stats["fallbacks"] == {"main": 3}
    rows: dict[str, tuple[str, dict[str, Any]]] = {
        request: (agent, orjson.loads(decision)["claims"])
        for request, agent, decision in query.select(
            f"SELECT client_request_id, agent_id, decision FROM {query.RECORDS} "
            "WHERE status = 'ok' AND decision != ''"
        )
    }
    for n in range(3):
        agent, claims = rows[f"fallback-{n}"]
        assert agent == "exec-b" and claims["subtree"] == "cpu" and claims["fallback_from"] == "main"
    for request in ("warm", "probe", "back"):
        agent, claims = rows[request]
        assert agent == "exec-a" and claims["subtree"] == "main" and "fallback_from" not in claims
    print(f"subtree fallback: {figures}, fallbacks {stats['fallbacks']}")


SCALING_CONFIG = """\
version: 1
scheduler:
  period_s: 1
  window_s: 5
  scale_up_p99_ms: 1           # every answer is slower: three periods with answers step up
  scale_down_p99_ms: 0         # never under: no step down in this test
subtrees:
  main:
    kind: inference
    executors: []
    sla: {p99_ms: 300, max_concurrency: 8}
    replicas: {min: 1, max: 2}
"""


def test_the_router_scales_a_subtree_with_executor_processes_it_starts(
    tree: Tree, tiny_model: Path, live_server: Any
) -> None:
    """Issue 18: the autoscaler in the router, with the local supervisor as its actuator. Subtree main
    has no executor and two replica slots (exec-a, exec-b). The first period brings it to its minimum:
    the router starts exec-a, which warms up and only then heartbeats. Answers slower than the (lowered)
    scale-up mark for three periods step it up: exec-b starts and heartbeats too. Both steps are events the
    platform stores; when the router stops, so do the replicas it started."""
    rules = copy.deepcopy(DEFAULT_RULES)
    for row in rules["policy"]:
        row["subtree"] = "main"
    (tree.root / "rules.json").write_text(json.dumps(rules))
    (tree.root / "tree-config.yaml").write_text(SCALING_CONFIG)
    tree.register("router-1", live_server.url, kind="router")
    register_publisher(tiny_model)  # the replicas the router starts load the tests' signed checkpoint
    ports = {name: free_port() for name in EXECUTORS}
    slots: dict[str, list[dict[str, Any]]] = {"main": []}
    for name in EXECUTORS:
        tree.register(name, live_server.url)
        directory = tree.root / name
        serve = [
            *("serve", "--platform-url", tree.platform_url, "--agent-id", name, "--data-dir", str(directory)),
            *("--model-dir", str(tiny_model), "--port", str(ports[name]), "--threads", "1"),
            *("--router-url", tree.router_url, "--router-key", tree.keys["router-1"], "--subtree", "main"),
        ]
        slots["main"].append({"agent_id": name, "command": agent_command(directory, *serve)})
    (tree.root / "slots.json").write_text(json.dumps(slots))
    tree.start_router(
        30,
        *("--rules", str(tree.root / "rules.json"), "--tree-config", str(tree.root / "tree-config.yaml")),
        *("--replica-slots", str(tree.root / "slots.json")),
    )
    tree.healthy(1)
    first = httpx.get(tree.router_url + "/tree/executors", timeout=5).json()["executors"]

    def two_serving() -> bool:
        tree.ask(f"r{len(tree.answered_at)}", "contract clause")
        listed = httpx.get(tree.router_url + "/tree/executors", timeout=2).json()["executors"]
        return sum(e["healthy"] for e in listed) == 2

    wait_for(two_serving, "the scale-up's second replica", list(tree.processes.values()))
    assert all(tree.ask(f"after-{n}", "contract clause") for n in range(4))
    scheduler = httpx.get(tree.router_url + "/tree/scheduler", timeout=5).json()
    router = tree.processes["router-1"]
    router.send_signal(signal.SIGTERM)
    router.wait(timeout=60)
    gone = []
    for name in EXECUTORS:
        try:
            httpx.get(f"http://127.0.0.1:{ports[name]}/v1/models", timeout=2)
        except httpx.ConnectError:
            gone.append(name)
    assert [e["executor"] for e in first] == ["exec-a"]
    assert gone == list(EXECUTORS)
    assert scheduler["events"]["shipped"] + scheduler["events"].get("pending", 0) >= 2
    steps = list(SchedulerEventRow.objects.filter(kind__in=("scale_up", "scale_down")).order_by("at_ns"))
    assert [(e.kind, e.subtree, e.figures["replicas"], e.figures["desired"]) for e in steps[:2]] == [
        ("scale_up", "main", 0, 1),
        ("scale_up", "main", 1, 2),
    ]
    assert "outside the bounds" in steps[0].reason and "above 1 ms for 3 periods" in steps[1].reason
    print(f"autoscaled: {[(e.kind, e.figures) for e in steps]}, answered {len(tree.answers)}")
