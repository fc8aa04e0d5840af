"""A key reaches only its compute package's models: the snapshot's optional ``models`` per key. A key whose
list leaves out the model asked for is answered exactly as for a model nobody serves (404
``model_not_found``, an unbilled ``rejected`` record naming no other model), by the agent, by the L1
router before it forwards, and by an executor behind the router whose snapshot says so. A key without the
field, or with an empty list, reaches every model (real torch engine, signed snapshots, real sockets)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from compute_agents.app import create_app
from compute_agents.engine import TorchEngine
from compute_agents.entitlements import SnapshotError
from compute_agents.router import Rules
from compute_agents.service import AgentService
from compute_agents.spool import Spool
from compute_agents.tree.decision import DecisionReader
from compute_agents.tree.inflight import InFlightLedger
from compute_agents.tree.registry import Registry
from compute_agents.tree.service import RouterService
from tests.compute_agents.openai_server import behind_router, records
from tests.compute_agents.publisher import trust
from tests.compute_agents.signed_snapshot import local_agent, signed_store, snapshot_key
from treemeter_records import private_key_from_seed

OTHER_MODEL = "acme/another-package-model"
RESTRICTED = "tmk_models-other"  # reaches only another package's model
ALLOWED = "tmk_models-this"  # its list names the served model
UNRESTRICTED = "tmk_models-none"  # no models field: every model
EMPTY = "tmk_models-empty"  # an empty list: every model


@pytest.fixture(scope="module")
def engine(tiny_model: Path) -> TorchEngine:
    return TorchEngine(tiny_model, trust=trust(tiny_model), workers=2)


def keys(engine: TorchEngine, restricted_to: str = OTHER_MODEL) -> list[dict[str, Any]]:
    return [
        snapshot_key(RESTRICTED, models=[restricted_to]),
        snapshot_key(ALLOWED, models=[OTHER_MODEL, engine.model_id]),
        snapshot_key(UNRESTRICTED),
        snapshot_key(EMPTY, models=[]),
    ]


def completion(key: str, model: str = "tiny") -> dict[str, Any]:
    return {
        "json": {"model": model, "prompt": "the payment clause", "max_tokens": 2, "temperature": 0},
        "headers": {"Authorization": f"Bearer {key}"},
    }


def test_the_agent_serves_a_key_only_the_models_of_its_package(engine: TorchEngine, tmp_path: Path) -> None:
    service = local_agent(engine, tmp_path, "gpu-m", keys(engine))
    client = TestClient(create_app(service))

    refused = client.post("/v1/completions", **completion(RESTRICTED))
    refused_by_id = client.post("/v1/completions", **completion(RESTRICTED, engine.model_id))
    unknown = client.post("/v1/completions", **completion(UNRESTRICTED, "tinx"))
    served = {
        key: client.post("/v1/completions", **completion(key)).status_code
        for key in (ALLOWED, UNRESTRICTED, EMPTY)
    }
    served_by_id = client.post("/v1/completions", **completion(ALLOWED, engine.model_id))

    assert served == {ALLOWED: 200, UNRESTRICTED: 200, EMPTY: 200} and served_by_id.status_code == 200
    assert refused.status_code == refused_by_id.status_code == unknown.status_code == 404
    # Exactly an unknown model's answer: nothing tells that the model exists.
    assert refused.json() == {"error": {**unknown.json()["error"], "message": message_for("tiny")}}
    assert refused.json()["error"]["code"] == "model_not_found"
    spooled = {r["record_id"]: r for r in records(service)}
    assert len(spooled) == 7  # every request of an active key, refused or served
    refusals = [spooled[answer.headers["x-request-id"]] for answer in (refused, refused_by_id, unknown)]
    for record in refusals:
        assert (record["status"], record["tokens_in"], record["tokens_out"]) == ("rejected", 0, 0)
        assert [hop["layer"] for hop in record["hops"]] == ["L1"]
    assert {record["model_id"] for record in refusals} == {engine.model_id}  # as for any refusal
    ok = [r for r in spooled.values() if r["status"] == "ok"]
    assert len(ok) == 4 and all(r["tokens_out"] > 0 for r in ok)


def message_for(model: str) -> str:
    return f"The model `{model}` does not exist or you do not have access to it."


def test_a_snapshot_whose_models_are_not_a_list_of_ids_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="models must be a list of model ids"):
        signed_store(tmp_path, "gpu-m", [snapshot_key(RESTRICTED, models="acme/model")])
    with pytest.raises(SnapshotError, match="models must be a list of model ids"):
        signed_store(tmp_path, "gpu-m", [snapshot_key(RESTRICTED, models=[7])])


@dataclass
class Tree:
    router: RouterService
    executor: AgentService
    url: str


@contextmanager
def routed(
    engine: TorchEngine,
    tmp_path: Path,
    router_keys: list[dict[str, Any]],
    executor_keys: list[dict[str, Any]],
) -> Iterator[Tree]:
    """An L1 router and one executor on real sockets, each with its own signed snapshot."""
    router_key, executor_key = (private_key_from_seed(os.urandom(32)) for _ in range(2))
    executor = local_agent(
        engine,
        tmp_path / "executor",
        "exec-m",
        executor_keys,
        key=executor_key,
        decisions=DecisionReader(router_key.public_key(), "exec-m"),
    )
    router = RouterService(
        "router-m",
        router_key,
        Rules.load(None),
        signed_store(tmp_path / "router", "router-m", router_keys),
        Spool(tmp_path / "router" / "spool.sqlite3"),
        Registry(),
        {"exec-m": executor_key.public_key()},
        InFlightLedger(tmp_path / "router" / "inflight.sqlite3"),
    )
    with behind_router(router, executor, "exec-m", executor_key, engine) as (router_url, _):
        yield Tree(router, executor, router_url)


def test_the_router_refuses_before_forwarding_what_the_key_may_not_reach(
    engine: TorchEngine, tmp_path: Path
) -> None:
    with routed(engine, tmp_path, keys(engine), keys(engine)) as tree:
        refused = httpx.post(tree.url + "/v1/completions", **completion(RESTRICTED))
        unknown = httpx.post(tree.url + "/v1/completions", **completion(UNRESTRICTED, "tinx"))
        served = {
            key: httpx.post(tree.url + "/v1/completions", **completion(key), timeout=60)
            for key in (ALLOWED, UNRESTRICTED, EMPTY)
        }
    assert {key: answer.status_code for key, answer in served.items()} == dict.fromkeys(served, 200)
    assert refused.status_code == unknown.status_code == 404
    assert refused.json() == {"error": {**unknown.json()["error"], "message": message_for("tiny")}}
    # The router's own unbilled records, alike: neither names the model the key may not reach.
    by_id = {r["record_id"]: r for r in records(tree.router)}
    assert len(by_id) == 2
    for answer in (refused, unknown):
        record = by_id[answer.headers["x-request-id"]]
        assert (record["status"], record["model_id"], record["tokens_in"]) == ("rejected", "unknown", 0)
    # Nothing refused reached the executor; what was served is recorded there, under the router's decision.
    executor_records = records(tree.executor)
    assert {r["record_id"] for r in executor_records} == {a.headers["x-request-id"] for a in served.values()}
    assert all(r["status"] == "ok" and r["v"] == 2 for r in executor_records)


def test_an_executor_behind_the_router_refuses_what_its_own_snapshot_restricts(
    engine: TorchEngine, tmp_path: Path
) -> None:
    """The router's snapshot does not restrict the key yet (each refreshes on its own); the executor's
    does, and refuses the forwarded request as an unknown model, in a signed v2 ``rejected`` record."""
    router_keys = [snapshot_key(RESTRICTED)]
    with routed(engine, tmp_path, router_keys, keys(engine)) as tree:
        refused = httpx.post(tree.url + "/v1/completions", **completion(RESTRICTED), timeout=60)
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "model_not_found"
    assert not records(tree.router)
    [record] = records(tree.executor)
    assert record["record_id"] == refused.headers["x-request-id"]
    assert (record["v"], record["status"], record["tokens_in"]) == (2, "rejected", 0)
