"""The agent's OpenAI-compatible API end to end: real platform (live server, PostgreSQL, ClickHouse),
real torch engine, real spool and shipper."""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from clickhouse_store import query
from compute_agents.app import create_app
from compute_agents.engine import TorchEngine
from compute_agents.entitlements import quota_period
from entitlements.services import issue_api_key, revoke_api_key
from tests.compute_agents.agent_harness import start_agent
from tests.compute_agents.model_sizes import SIZES
from tests.factories import ContractFactory

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db(transaction=True)]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def completion(prompt: str = "the contract review clause", max_tokens: int = 8) -> dict[str, Any]:
    return {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}


def test_a_served_request_becomes_one_shipped_record(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    key = issue_api_key(contract_code=contract.code, sla_class="gold").secret
    harness = start_agent(live_server.url, tiny_model, tmp_path, [contract])
    client = TestClient(create_app(harness.agent.service))

    answer = client.post("/v1/completions", json=completion(), headers={**bearer(key), "X-Request-Id": "r-1"})
    chat = client.post(
        "/v1/chat/completions",
        json={"model": "tiny", "messages": [{"role": "user", "content": "合同 审查"}], "max_tokens": 5},
        headers=bearer(key),
    )
    assert answer.status_code == 200 and chat.status_code == 200
    usage = answer.json()["usage"]
    assert answer.json()["object"] == "text_completion" and chat.json()["object"] == "chat.completion"
    assert harness.agent.service.spool.status().depth == 2
    assert harness.agent.shipper.drain() == 2
    rows = query.select_dicts(
        f"SELECT seq, tenant, contract, package, sla_class, tokens_in, tokens_out, expert_tokens, "
        f"client_request_id, status, weights_sha3, length(hops) AS hops FROM {query.RECORDS} ORDER BY seq"
    )
    first = rows[0]
    assert (first["seq"], first["tenant"], first["contract"], first["package"], first["sla_class"]) == (
        0,
        contract.tenant.code,
        contract.code,
        contract.package.code,
        "gold",
    )
    assert (first["tokens_in"], first["tokens_out"]) == (usage["prompt_tokens"], usage["completion_tokens"])
    tokens = usage["prompt_tokens"] + usage["completion_tokens"]
    assert first["expert_tokens"] == (tokens - 1) * SIZES.top_k * SIZES.layers
    assert (first["client_request_id"], first["status"], first["hops"]) == ("r-1", "ok", 4)
    assert first["weights_sha3"] == harness.agent.service.engine.weights_sha3
    assert [r["seq"] for r in rows] == [0, 1]
    assert harness.agent.service.spool.status().depth == 0


def test_bad_keys_get_openai_errors_and_leave_no_record(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    revoked = issue_api_key(contract_code=contract.code)
    revoke_api_key(revoked.api_key.prefix)
    harness = start_agent(live_server.url, tiny_model, tmp_path, [contract])
    client = TestClient(create_app(harness.agent.service))

    missing = client.post("/v1/completions", json=completion())
    unknown = client.post("/v1/completions", json=completion(), headers=bearer("tmk_nope"))
    forbidden = client.post("/v1/completions", json=completion(), headers=bearer(revoked.secret))
    assert [r.status_code for r in (missing, unknown, forbidden)] == [401, 401, 403]
    assert unknown.json() == {
        "error": {
            "message": "Incorrect API key provided.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    assert forbidden.json()["error"]["code"] == "api_key_revoked"
    assert harness.agent.service.spool.status().next_seq == 0


def test_malformed_requests_get_400_and_an_unbilled_rejected_record(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    key = issue_api_key(contract_code=contract.code).secret
    harness = start_agent(live_server.url, tiny_model, tmp_path, [contract])
    client = TestClient(create_app(harness.agent.service))
    bad = [
        client.post("/v1/completions", content=b"{not json", headers=bearer(key)),
        client.post("/v1/completions", json={"model": "tiny"}, headers=bearer(key)),
        client.post("/v1/completions", json=completion(max_tokens=0), headers=bearer(key)),
        client.post("/v1/completions", json=completion(max_tokens=100_000), headers=bearer(key)),
        client.post("/v1/chat/completions", json={"model": "tiny", "messages": []}, headers=bearer(key)),
        client.post("/v1/completions", json={**completion(), "model": "bad model!"}, headers=bearer(key)),
    ]
    assert [r.status_code for r in bad] == [400] * 6
    assert [r.json()["error"]["param"] for r in bad] == [
        None,
        "prompt",
        "max_tokens",
        "max_tokens",
        "messages",
        "model",
    ]
    assert harness.agent.shipper.drain() == 6
    rows = query.select_dicts(
        f"SELECT status, tokens_in, tokens_out, expert_tokens, length(hops) AS hops FROM {query.RECORDS}"
    )
    assert (
        rows == [{"status": "rejected", "tokens_in": 0, "tokens_out": 0, "expert_tokens": 0, "hops": 1}] * 6
    )


def test_quota_is_reserved_before_the_forward_pass_so_concurrent_requests_cannot_overspend(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    harness = start_agent(live_server.url, tiny_model, tmp_path, [contract])
    service = harness.agent.service
    prompt = "the contract review clause"
    worst_case = service.engine.count_tokens(prompt) + 6
    key = issue_api_key(contract_code=contract.code, quota_tokens=worst_case * 3).secret
    harness.agent.entitlements.refresh()
    client = TestClient(create_app(service))

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(
            pool.map(
                lambda _: client.post("/v1/completions", json=completion(prompt, 6), headers=bearer(key)),
                range(8),
            )
        )
    statuses = sorted(a.status_code for a in answers)
    used = sum(a.json()["usage"]["total_tokens"] for a in answers if a.status_code == 200)
    assert statuses.count(200) >= 3 and set(statuses) == {200, 429}
    assert used <= worst_case * 3
    entitlement = service.entitlements.lookup(key)
    assert entitlement is not None

    assert service.spool.quota_used(entitlement.key_hash, quota_period(time.time_ns())) == used
    assert [a.json()["error"]["code"] for a in answers if a.status_code == 429] == [
        "insufficient_quota"
    ] * statuses.count(429)


def test_the_policy_path_skips_l2_for_the_batch_class(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    key = issue_api_key(contract_code=contract.code, sla_class="batch").secret
    harness = start_agent(live_server.url, tiny_model, tmp_path, [contract], cache_capacity=2)
    client = TestClient(create_app(harness.agent.service))
    assert client.post("/v1/completions", json=completion(), headers=bearer(key)).status_code == 200
    (_, _, body) = harness.agent.service.spool.pending(1)[0]
    record = orjson.loads(body)
    assert [h["layer"] for h in record["hops"]] == ["L1", "L3", "L1"]
    assert record["hops"][0]["node"] == harness.agent.service.rules.node
    # No L2 hop, yet the experts came through the bounded cache: what it did is in the record.
    assert record["expert_cache_hits"] + record["expert_cache_misses"] > 0
    engine = harness.agent.service.engine
    assert isinstance(engine, TorchEngine) and engine.cache.recent == deque()  # no write-back without L2
    metrics = client.get("/metrics").text
    assert 'treemeter_agent_requests_total{route="/v1/completions",status="ok"} 1.0' in metrics
    assert "treemeter_agent_spool_depth 1.0" in metrics


def test_a_full_spool_refuses_new_requests_with_503(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    key = issue_api_key(contract_code=contract.code).secret
    harness = start_agent(live_server.url, tiny_model, tmp_path, [contract], spool_max_records=2)
    client = TestClient(create_app(harness.agent.service))
    assert [
        client.post("/v1/completions", json=completion(), headers=bearer(key)).status_code for _ in range(2)
    ] == [200, 200]
    refused = client.post("/v1/completions", json=completion(), headers=bearer(key))
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "spool_full"
    assert "over its limit" in refused.json()["error"]["message"]
    assert harness.agent.service.spool.status().next_seq == 2
    harness.agent.shipper.drain()
    assert client.post("/v1/completions", json=completion(), headers=bearer(key)).status_code == 200


def test_streamed_completions_send_text_as_it_comes_and_meter_it(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    key = issue_api_key(contract_code=contract.code).secret
    harness = start_agent(live_server.url, tiny_model, tmp_path, [contract])
    client = TestClient(create_app(harness.agent.service))
    whole = client.post("/v1/completions", json=completion(max_tokens=10), headers=bearer(key)).json()
    streamed = client.post(
        "/v1/completions",
        json={**completion(max_tokens=10), "stream": True, "stream_options": {"include_usage": True}},
        headers=bearer(key),
    )
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    events = [line.removeprefix("data: ") for line in streamed.text.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    assert len(chunks) > 2
    assert "".join(c["choices"][0]["text"] for c in chunks[:-1]) == whole["choices"][0]["text"]
    assert chunks[-1]["usage"] == whole["usage"] and chunks[-1]["choices"] == []
    assert chunks[-2]["choices"][0]["finish_reason"] == "length" and chunks[-2]["treemeter"]["seq"] == 1
    chat = client.post(
        "/v1/chat/completions",
        json={
            "model": "tiny",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4,
            "stream": True,
        },
        headers=bearer(key),
    )
    chat_chunks = [orjson.loads(e.removeprefix("data: ")) for e in chat.text.split("\n\n")[:-2]]
    assert chat_chunks[0]["object"] == "chat.completion.chunk" and "delta" in chat_chunks[0]["choices"][0]
    records = [orjson.loads(body) for _, _, body in harness.agent.service.spool.pending(10)]
    assert [r["tokens_out"] for r in records] == [10, 10, 4]
    assert records[1]["tokens_in"] == whole["usage"]["prompt_tokens"]
    bad = client.post("/v1/completions", json={**completion(), "stream": "yes"}, headers=bearer(key))
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "stream"
    # A client that leaves mid-stream: test_openai_sdk.py, on a real socket.


def test_metrics_report_what_the_records_say(tiny_model: Path, tmp_path: Path, live_server: Any) -> None:
    contract = ContractFactory.create()
    key = issue_api_key(contract_code=contract.code, sla_class="gold").secret
    harness = start_agent(live_server.url, tiny_model, tmp_path, [contract], cache_capacity=3, preheat=1)
    client = TestClient(create_app(harness.agent.service))
    for prompt in ("payment invoice", "patient report hospital"):
        assert client.post("/v1/completions", json=completion(prompt), headers=bearer(key)).status_code == 200
    client.post("/v1/completions", json=completion(), headers=bearer("tmk_wrong"))
    records = [orjson.loads(body) for _, _, body in harness.agent.service.spool.pending(10)]
    metrics = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in client.get("/metrics").text.splitlines()
        if line and not line.startswith("#")
    }
    activations = sum(
        v for k, v in metrics.items() if k.startswith("treemeter_agent_expert_activations_total{")
    )
    assert activations == sum(r["expert_tokens"] for r in records)
    hits = sum(r["expert_cache_hits"] for r in records)
    misses = sum(r["expert_cache_misses"] for r in records)
    assert metrics["treemeter_agent_expert_cache_hits_total"] == hits
    assert metrics["treemeter_agent_expert_cache_misses_total"] == misses
    assert metrics["treemeter_agent_expert_cache_hit_rate"] == pytest.approx(hits / (hits + misses))
    assert metrics['treemeter_agent_tokens_total{direction="out"}'] == sum(r["tokens_out"] for r in records)
    assert metrics['treemeter_agent_requests_total{route="/v1/completions",status="http_401"}'] == 1
    assert metrics["treemeter_agent_spool_depth"] == 2 and metrics["treemeter_agent_shipping_lag_seconds"] > 0
    assert metrics['treemeter_agent_layer_latency_seconds_count{layer="L3"}'] == 2
