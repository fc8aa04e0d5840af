"""The serving tree over real sockets: a live platform, an L1 router and two executors (torch engine,
each its own agent with its own spool), the executors heartbeating to the router. Customers talk to the
router with the official ``openai`` SDK; every answer is checked against the record the executor that
served it spooled, under the router's decision (record id, start, path, L1 node)."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionMessageParam

from agents.services import register_agent
from clickhouse_store.queries.billing import superseded_attempts
from compute_agents.app import create_app
from compute_agents.checkpoint import EXPERTS_DIR
from compute_agents.expert_cache import ExpertIntegrityError
from compute_agents.runtime import pin_platform_key
from compute_agents.tree.app import create_router_app
from compute_agents.tree.forward import ExecutorClient
from compute_agents.tree.heartbeat import HEARTBEAT_PATH
from compute_agents.tree.runtime import RouterSettings, TreeRouter, build_router
from contracts.models import Contract
from entitlements.services import issue_api_key
from ingest.models import RejectedRecord
from tests.compute_agents.agent_harness import Harness, start_agent
from tests.compute_agents.openai_server import record, records, serving_app
from tests.factories import ContractFactory
from treemeter_records import (
    canonical_bytes,
    check_record_signatures,
    private_key_from_seed,
    protocol,
    public_key_to_b64,
    record_signing_bytes,
)
from treemeter_records.receipts import RECEIPT_HEADER, read_receipt, verify_receipt

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db(transaction=True)]

USER: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "review the payment clause of this contract"}
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Tree:
    router: TreeRouter
    url: str  # the router's root URL
    executors: dict[str, Harness]
    urls: dict[str, str]
    apis: dict[str, ExitStack] = field(default_factory=dict)  # close one: that executor's port goes dark

    def stats(self) -> dict[str, Any]:
        return httpx.get(self.url + "/tree/stats").json()

    def served_by(self, record_id: str) -> tuple[str, dict[str, Any]]:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for name, harness in self.executors.items():
                found = [r for r in records(harness.agent.service) if r["record_id"] == record_id]
                if found:
                    return name, found[0]
            time.sleep(0.05)
        raise AssertionError(f"no executor recorded {record_id}")


@contextmanager
def serving_tree(
    live_server: Any,
    tiny_model: Path,
    tmp_path: Path,
    contract: Contract,
    tree_config: Path | None = None,
    tampered: Path | None = None,
) -> Iterator[Tree]:
    """Two executors announced to the router (warm-up check, then heartbeats); with ``tampered`` (a model
    directory) a third, ``exec-c``, known to the router, whose warm-up must fail on that model."""
    router_seed = os.urandom(32)
    router_key = private_key_from_seed(router_seed)
    register_agent(
        agent_id="router-1",
        public_key_b64=public_key_to_b64(router_key),
        tenant_codes=[],
        contract_codes=[contract.code],
        kind="router",
    )
    pin_platform_key(live_server.url, tmp_path / "router")
    names = ("exec-a", "exec-b") if tampered is None else ("exec-a", "exec-b", "exec-c")
    seeds = {name: os.urandom(32) for name in names}
    settings = RouterSettings(
        agent_id="router-1",
        platform_url=live_server.url,
        data_dir=tmp_path / "router",
        executor_keys={name: public_key_to_b64(private_key_from_seed(seed)) for name, seed in seeds.items()},
        tree_config=tree_config,
    )
    router = build_router(settings, router_seed)
    router.service.registry.rng = random.Random(7)  # the power-of-two draws, reproducible
    router.entitlements.refresh()
    with ExitStack() as stack:
        client = ExecutorClient(60)
        url = stack.enter_context(serving_app(create_router_app(router.service, client)))
        tree = Tree(router, url, {}, {})
        for name, seed in seeds.items():
            port = free_port()
            tree.urls[name] = f"http://127.0.0.1:{port}"
            harness = start_agent(
                live_server.url,
                tampered if name == "exec-c" and tampered is not None else tiny_model,
                tmp_path / name,
                [contract],
                agent_id=name,
                seed=seed,
                router_url=url,
                router_key=public_key_to_b64(router_key),
                advertise_url=tree.urls[name],
                heartbeat_s=0.2,
            )
            tree.executors[name] = harness
            api = tree.apis[name] = ExitStack()
            api.enter_context(serving_app(create_app(harness.agent.service), port))
            stack.callback(api.close)
            assert harness.agent.heartbeat is not None
            stack.callback(harness.agent.heartbeat.stop)
            if name == "exec-c":
                with pytest.raises(ExpertIntegrityError):
                    harness.agent.announce()
                continue
            harness.agent.announce()
        deadline = time.monotonic() + 20
        while len(router.service.registry.healthy("default", "tiny")) < 2:
            assert time.monotonic() < deadline, "the executors' heartbeats did not reach the router"
            time.sleep(0.05)
        yield tree


def customer(tree: Tree, contract: Contract) -> openai.OpenAI:
    key = issue_api_key(contract_code=contract.code, sla_class="gold").secret
    tree.router.entitlements.refresh()
    for harness in tree.executors.values():
        harness.agent.entitlements.refresh()
    return openai.OpenAI(base_url=tree.url + "/v1", api_key=key, max_retries=0)


def test_requests_through_the_router_are_recorded_by_their_executor_under_its_decision(
    live_server: Any, tiny_model: Path, tmp_path: Path
) -> None:
    contract = ContractFactory.create()
    with serving_tree(live_server, tiny_model, tmp_path, contract) as tree:
        client = customer(tree, contract)
        answers = [
            client.chat.completions.create(model="tiny", messages=USER, max_completion_tokens=4)
            for _ in range(8)
        ]
        with client.chat.completions.with_streaming_response.create(
            model="tiny",
            messages=USER,
            max_completion_tokens=4,
            stream=True,
        ) as streamed:
            stream_id = streamed.headers["x-request-id"]
            lines = [line for line in streamed.iter_lines() if line]
        listed = httpx.get(tree.url + "/tree/executors").json()
        stats = tree.stats()
        with ThreadPoolExecutor(12) as pool:
            burst = list(
                pool.map(
                    lambda _: client.chat.completions.create(
                        model="tiny", messages=USER, max_completion_tokens=8
                    ),
                    range(12),
                )
            )
        burst_by = {tree.served_by(answer._request_id or "")[0] for answer in burst}
    rules = tree.router.service.rules
    served = {}
    for answer in answers:
        name, rec = tree.served_by(answer._request_id or "")
        served[answer._request_id] = name
        assert (
            answer.usage is not None and 0 < answer.usage.completion_tokens <= 4
        )  # sampled: EOS may come first
        assert (rec["agent_id"], rec["status"], rec["tokens_out"]) == (
            name,
            "ok",
            answer.usage.completion_tokens,
        )
        assert answer.id == "chatcmpl-" + rec["record_id"]
        assert rec["hops"][0]["node"] == rules.node  # the router's L1 node, not the executor's
        path = rules.decide("", rec["package"], rec["sla_class"]).path  # no classifier: the policy's path
        assert tuple(hop["layer"] for hop in rec["hops"]) == path
        assert rec["hops"][0]["latency_us"] > 0
        assert rec["end_ns"] > rec["start_ns"]
        # v2: the router's decision as it signed it, and the executor's signature over the record.
        assert rec["v"] == 2 and rec["decision"]["claims"]["executor"] == name
        assert rec["decision"]["claims"]["record_id"] == rec["record_id"]
        check_record_signatures(
            record_signing_bytes(rec),
            rec["executor_sig"],
            rec["decision"],
            private_key_from_seed(tree.executors[name].seed).public_key(),
            tree.router.service.key.public_key(),
        )
    assert set(served.values()) <= {"exec-a", "exec-b"}
    # L2 preparation: the router learns from the answers which experts the domain uses, and asks the
    # next executor to preheat them (the first request had nothing to go on).
    ordered = [tree.served_by(a._request_id or "")[1] for a in answers]
    used: set[tuple[int, int]] = set()
    for index, rec in enumerate(ordered):
        asked = {(layer, expert) for layer, expert in rec["decision"]["claims"]["preheat"]}
        assert asked <= used and (index == 0) == (not asked)
        used |= {(e["layer"], e["expert"]) for e in rec["experts"]}
    assert lines[-1] == "data: [DONE]" and tree.served_by(stream_id)[1]["status"] == "ok"
    assert sum(stats["by_executor"].values()) == 9 and stats["failovers"] == 0 and stats["unserved"] == 0
    # One at a time, cache affinity keeps the requests on the executor holding the domain's experts;
    # a burst beyond its capacity (4 at once) spills over to the other.
    assert burst_by == {"exec-a", "exec-b"}
    assert stats["decision_us"]["count"] == stats["decisions"] == 9 and stats["decision_us"]["p99"] < 10_000
    assert [e["executor"] for e in listed["executors"]] == ["exec-a", "exec-b"]
    assert all(e["healthy"] and e["breaker"] == "closed" for e in listed["executors"])
    assert listed["executors"][0]["resident"]  # the experts it holds, as its heartbeat said
    assert not records(tree.router.service)  # the router recorded nothing it did not refuse


def test_a_replica_whose_warm_up_fails_is_never_heard_of_by_the_router(
    live_server: Any, tiny_model: Path, tmp_path: Path
) -> None:
    """Issue 18: a replica serves only after its warm-up check. Every expert file of exec-c's model is
    tampered with, so its one warm-up token fails the fingerprint check and it never heartbeats."""
    tampered = tmp_path / "tampered-model"
    shutil.copytree(tiny_model, tampered)
    for victim in (tampered / EXPERTS_DIR).glob("*.safetensors"):
        data = bytearray(victim.read_bytes())
        data[-1] ^= 0xFF
        victim.write_bytes(bytes(data))
    contract = ContractFactory.create()
    with serving_tree(live_server, tiny_model, tmp_path, contract, tampered=tampered) as tree:
        client = customer(tree, contract)
        answers = [
            client.chat.completions.create(model="tiny", messages=USER, max_completion_tokens=4)
            for _ in range(6)
        ]
        time.sleep(0.5)  # more than two heartbeat periods (0.2 s)
        known = set(tree.router.service.registry.executors)
    assert known == {"exec-a", "exec-b"}  # exec-c's key is the router's: one heartbeat would list it
    assert {tree.served_by(answer._request_id or "")[0] for answer in answers} <= {"exec-a", "exec-b"}


def test_a_dead_executor_fails_over_its_breaker_counts_and_none_left_is_an_unbilled_503(
    live_server: Any, tiny_model: Path, tmp_path: Path
) -> None:
    """The executor that served first holds the domain's experts, so cache affinity sends the next
    request to it: once its port is dark, that attempt fails over to the other and counts on its
    breaker (open from 3 in a row, see test_tree_registry). With none left: an unbilled 503."""
    contract = ContractFactory.create()
    with serving_tree(live_server, tiny_model, tmp_path, contract) as tree:
        client = customer(tree, contract)
        first = client.completions.create(model="tiny", prompt="the clause", max_tokens=3, temperature=0)
        dark = tree.served_by(first._request_id or "")[0]
        other = next(name for name in tree.executors if name != dark)
        registry = tree.router.service.registry
        deadline = time.monotonic() + 10
        while not any(registry.executors[dark].beat.resident.values()):
            assert time.monotonic() < deadline, "the first executor's heartbeat never showed its experts"
            time.sleep(0.05)
        tree.apis[dark].close()  # its port is dark; its heartbeats still arrive
        answers = [
            client.completions.create(model="tiny", prompt="the clause", max_tokens=3, temperature=0)
            for _ in range(8)
        ]
        stats = tree.stats()
        failed = registry.executors[dark].failures
        breaker = {
            e["executor"]: e["breaker"] for e in httpx.get(tree.url + "/tree/executors").json()["executors"]
        }
        tree.apis[other].close()
        with pytest.raises(openai.InternalServerError) as none_left:
            client.completions.create(model="tiny", prompt="the clause", max_tokens=3)
    assert {tree.served_by(a._request_id or "")[0] for a in answers} == {other}
    assert stats["by_executor"] == {dark: 1, other: 8} and stats["failovers"] == failed >= 1
    assert breaker == {dark: "open" if failed >= 3 else "closed", other: "closed"}
    assert none_left.value.status_code == 503 and none_left.value.code == "no_executor"
    unserved = record(tree.router.service, none_left.value.request_id or "")
    assert (unserved["status"], unserved["agent_id"], unserved["tokens_in"]) == ("error", "router-1", 0)
    assert [hop["layer"] for hop in unserved["hops"]] == ["L1"]
    assert unserved["model_id"] == tree.executors[other].agent.service.engine.model_id


def test_executors_serve_only_what_their_router_decided_and_the_router_refuses_with_records(
    live_server: Any, tiny_model: Path, tmp_path: Path
) -> None:
    contract = ContractFactory.create()
    with serving_tree(live_server, tiny_model, tmp_path, contract) as tree:
        client = customer(tree, contract)
        key = client.api_key
        body = {"model": "tiny", "prompt": "the clause", "max_tokens": 2}
        direct = httpx.post(
            tree.urls["exec-a"] + "/v1/completions", json=body, headers={"authorization": f"Bearer {key}"}
        )
        forged = httpx.post(
            tree.urls["exec-a"] + "/v1/completions",
            json=body,
            headers={"authorization": f"Bearer {key}", "x-treemeter-decision": "e30="},
        )
        with pytest.raises(openai.NotFoundError) as unknown_model:
            client.completions.create(model="gpt-4o", prompt="the clause", max_tokens=2)
        with pytest.raises(openai.BadRequestError) as bad_param:
            client.completions.create(model="tiny", prompt="the clause", max_tokens=2, temperature=9)
        bad_key = httpx.post(
            tree.url + "/v1/completions", json=body, headers={"authorization": "Bearer nope"}
        )
        unknown_path = httpx.get(tree.url + "/v1/nothing-here")
        with pytest.raises(openai.NotFoundError) as unknown_card:
            client.models.retrieve("gpt-4o")
        card = client.models.retrieve("tiny")
        served = client.completions.with_raw_response.create(model="tiny", prompt="the clause", max_tokens=2)
        beat = orjson.dumps(tree.executors["exec-a"].agent.heartbeat.body())  # type: ignore[union-attr]
        intruder = private_key_from_seed(os.urandom(32))
        forged_beat = httpx.post(
            tree.url + HEARTBEAT_PATH,
            content=beat,
            headers=protocol.signed_headers(intruder, "exec-a", "POST", HEARTBEAT_PATH, beat),
        )
    assert direct.status_code == 403 and direct.json()["error"]["code"] == "decision_missing"
    assert forged.status_code == 403 and forged.json()["error"]["code"] == "decision_invalid"
    assert not records(tree.executors["exec-a"].agent.service)  # no decision, no record
    assert unknown_model.value.code == "model_not_found"
    assert bad_param.value.code == "invalid_value" and bad_param.value.param == "temperature"
    refused = [
        record(tree.router.service, e.request_id or "") for e in (unknown_model.value, bad_param.value)
    ]
    assert [(r["status"], r["tokens_in"], r["agent_id"]) for r in refused] == [
        ("rejected", 0, "router-1")
    ] * 2
    assert bad_key.status_code == 401 and bad_key.json()["error"]["code"] == "invalid_api_key"
    assert unknown_path.status_code == 404 and unknown_path.json()["error"]["code"] == "not_found"
    assert unknown_card.value.code == "model_not_found" and card.id == "tiny"
    assert len(records(tree.router.service)) == 2  # an unknown key leaves no record
    # Receipts: the router's refusal carries one signed by the router's key, a served answer its
    # executor's, relayed; each names the record its signer spooled.
    refusal = read_receipt(unknown_model.value.response.headers[RECEIPT_HEADER])
    assert verify_receipt(refusal, tree.router.service.key.public_key())
    assert (refusal.record_id, refusal.claims["agent_id"]) == (refused[0]["record_id"], "router-1")
    answer = read_receipt(served.headers[RECEIPT_HEADER])
    name, spooled = tree.served_by(served.headers["x-request-id"])
    assert verify_receipt(answer, private_key_from_seed(tree.executors[name].seed).public_key())
    assert answer.leaf_hash == hashlib.sha256(b"\x00" + canonical_bytes(spooled)).digest()
    assert forged_beat.status_code == 403 and forged_beat.json()["error"]["code"] == "unknown_executor"


def test_a_request_the_router_lost_is_superseded_when_it_starts_again(
    live_server: Any, tiny_model: Path, tmp_path: Path
) -> None:
    """Answered requests leave the in-flight ledger (whole, streamed, and a 503). A request the router
    sent and never answered (it died with the answer in flight: here its attempt is sent by hand and the
    router never hears back) is in the ledger; the router's start supersedes it with an unbilled v2
    ``error`` record, which ingest accepts, and the executor's ``ok`` record is billed to nobody."""
    contract = ContractFactory.create()
    with serving_tree(live_server, tiny_model, tmp_path, contract) as tree:
        client = customer(tree, contract)
        service = tree.router.service
        client.completions.create(model="tiny", prompt="the clause", max_tokens=2)
        with client.completions.with_streaming_response.create(
            model="tiny", prompt="the clause", max_tokens=2, stream=True
        ) as streamed:
            assert [line for line in streamed.iter_lines() if line][-1] == "data: [DONE]"
        assert service.inflight.lost() == []  # handed over: settled

        body = {"model": "tiny", "prompt": "the indemnity clause", "max_tokens": 2}
        routing = service.admit("/v1/completions", f"Bearer {client.api_key}", body)
        executor = service.registry.choose(routing.decision.subtree, "tiny", exclude=[])
        assert executor is not None
        incoming = {"authorization": f"Bearer {client.api_key}", "content-type": "application/json"}
        record_id, headers = service.attempting(routing, executor, incoming, ())
        ran = httpx.post(executor.beat.url + "/v1/completions", json=body, headers=headers, timeout=60)
        assert ran.status_code == 200  # the executor ran it and committed ok; the router never answered
        ran_by, ran_record = tree.served_by(record_id)
        assert ran_record["status"] == "ok"
        [lost] = service.inflight.lost()
        assert lost.attempts == (record_id,) and lost.contract == contract.code

        assert service.recover_lost() == 1  # what a restarted router does first
        assert service.inflight.lost() == [] and service.recover_lost() == 0
        [superseding] = records(service)
        claims = superseding["decision"]["claims"]
        assert (superseding["status"], superseding["agent_id"], superseding["tokens_in"]) == (
            "error",
            "router-1",
            0,
        )
        assert claims["supersedes"] == [record_id] and claims["executor"] == "router-1"
        assert (superseding["contract"], superseding["start_ns"]) == (contract.code, routing.start_ns)
        for shipper in (tree.router.shipper, tree.executors[ran_by].agent.shipper):
            shipper.ship_once(force=True)
    assert not RejectedRecord.objects.exists()  # both signatures of the router's record verified
    now = datetime.now(UTC)
    superseded = superseded_attempts([contract.code], now - timedelta(days=1), now + timedelta(days=1))
    assert [attempt.record_id for attempt in superseded] == [record_id]


LINE_CONFIG = """\
version: 1
subtrees:
  default:
    kind: inference
    executors: [exec-a, exec-b]
    sla: {p99_ms: 300, max_concurrency: 1}
    queue: 2
    priorities:
      - {sla_class: gold, priority: 9}
      - {sla_class: '*', priority: 3}
"""


def test_a_subtrees_line_serves_by_priority_and_turns_away_when_full(
    live_server: Any, tiny_model: Path, tmp_path: Path
) -> None:
    """With --tree-config the default subtree runs one request at a time: a standard request waits, a
    gold one arriving after it is served first, and one more finds the line (2) full: 429 queue_full
    with an unbilled rejected record from the router."""
    contract = ContractFactory.create()
    config = tmp_path / "tree-config.yaml"
    config.write_text(LINE_CONFIG)
    with serving_tree(live_server, tiny_model, tmp_path, contract, config) as tree:
        gold = customer(tree, contract)
        standard = openai.OpenAI(
            base_url=tree.url + "/v1",
            api_key=issue_api_key(contract_code=contract.code, sla_class="standard").secret,
            max_retries=0,
        )
        tree.router.entitlements.refresh()
        for harness in tree.executors.values():
            harness.agent.entitlements.refresh()
        lines = tree.router.service.lines
        assert lines is not None

        def ask(client: openai.OpenAI, tokens: int) -> Any:
            return client.completions.create(
                model="tiny", prompt="the clause", max_tokens=tokens, temperature=0
            )

        def until(check: Any) -> None:
            deadline = time.monotonic() + 20
            while not check():
                assert time.monotonic() < deadline
                time.sleep(0.005)

        with ThreadPoolExecutor(3) as pool:
            running = pool.submit(ask, standard, 200)
            until(lambda: lines.running["default"] == 1)
            later = pool.submit(ask, standard, 4)
            until(lambda: lines.waiting("default") == 1)
            sooner = pool.submit(ask, gold, 4)
            until(lambda: lines.waiting("default") == 2)
            with pytest.raises(openai.RateLimitError) as full:
                ask(gold, 4)
            answers = {
                name: future.result()
                for name, future in (("running", running), ("later", later), ("sooner", sooner))
            }
        stats = tree.stats()
    ends = {name: tree.served_by(answer._request_id or "")[1]["end_ns"] for name, answer in answers.items()}
    assert ends["running"] < ends["sooner"] < ends["later"]  # gold (9) before standard (3), one at a time
    assert full.value.code == "queue_full" and full.value.response.headers["retry-after"] == "1"
    turned_away = record(tree.router.service, full.value.request_id or "")
    assert (turned_away["status"], turned_away["agent_id"], turned_away["tokens_in"]) == (
        "rejected",
        "router-1",
        0,
    )
    assert sum(stats["by_executor"].values()) == 3 and lines.running["default"] == 0
