"""The agent driven by the official ``openai`` SDK, as a customer moving from OpenAI or vLLM would: chat
and legacy completions, models, every error class, sampling, stop, n, streaming and a client that hangs
up mid-stream, each checked against the record the agent spooled (real platform, torch engine, uvicorn)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from entitlements.services import issue_api_key, revoke_api_key
from tests.compute_agents.agent_harness import Harness, start_agent
from tests.compute_agents.openai_server import record, records, serving
from tests.factories import ContractFactory

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db(transaction=True)]

PROMPT = "the contract review clause"
USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "合同 审查 the clause"}]


def agent(live_server: Any, tiny_model: Path, tmp_path: Path, **overrides: Any) -> tuple[Harness, str]:
    """A real agent and a key of its contract."""
    contract = ContractFactory.create()
    key = issue_api_key(contract_code=contract.code, sla_class="gold", **overrides).secret
    return start_agent(live_server.url, tiny_model, tmp_path, [contract]), key


def test_chat_completions_and_models_answer_under_the_real_model_id(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    harness, key = agent(live_server, tiny_model, tmp_path)
    service = harness.agent.service
    real = service.engine.model_id
    with serving(service) as url:
        client = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
        chat = client.chat.completions.create(model="tiny", messages=USER, max_completion_tokens=5)
        text = client.completions.create(model=real, prompt=PROMPT, max_tokens=6, temperature=0)
        listed = client.models.list()
        card = client.models.retrieve("tiny")
        with pytest.raises(openai.NotFoundError) as missing_model:
            client.models.retrieve("gpt-4o")
        with pytest.raises(openai.NotFoundError) as unknown_model:
            client.chat.completions.create(model="gpt-4o", messages=USER)
        unknown_path = httpx.get(url + "/nothing-here")
        wrong_method = httpx.get(url + "/chat/completions")
    assert chat.model == text.model == real  # the model that ran, not the name asked for
    assert chat.choices[0].message.role == "assistant" and chat.usage is not None
    assert chat.usage.completion_tokens == 5 and chat.choices[0].finish_reason == "length"
    assert chat.usage.prompt_tokens_details is not None
    assert chat.usage.prompt_tokens_details.cached_tokens == 0  # the torch engine has no prefix cache
    first = record(service, chat._request_id or "")
    assert chat.id == "chatcmpl-" + first["record_id"] and text.id == "cmpl-" + (text._request_id or "")
    assert (first["model_id"], first["status"], first["tokens_out"]) == (real, "ok", 5)
    assert first["tokens_in"] == chat.usage.prompt_tokens
    assert [m.id for m in listed.data] == [real, "tiny"]
    assert (card.id, card.owned_by, card.object) == ("tiny", "treemeter", "model") and card.created > 0
    for refused in (missing_model.value, unknown_model.value):
        assert refused.code == "model_not_found" and refused.body["param"] == "model"  # type: ignore[index]
    rejected = record(service, unknown_model.value.request_id or "")
    assert (rejected["status"], rejected["tokens_in"], rejected["model_id"]) == ("rejected", 0, real)
    assert unknown_path.status_code == 404 and unknown_path.json()["error"]["code"] == "not_found"
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["code"] == "method_not_allowed"
    assert set(wrong_method.json()["error"]) == {"message", "type", "param", "code"}
    assert wrong_method.headers["allow"] == "POST" and "x-request-id" in wrong_method.headers


def test_every_error_class_with_its_param_and_a_rejected_record(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    key = issue_api_key(contract_code=contract.code).secret
    revoked = issue_api_key(contract_code=contract.code)
    revoke_api_key(revoked.api_key.prefix)
    service = start_agent(live_server.url, tiny_model, tmp_path, [contract]).agent.service
    bad: list[tuple[dict[str, Any], str, str]] = [
        ({"temperature": "hot"}, "temperature", "invalid_type"),
        ({"temperature": 2.5}, "temperature", "invalid_value"),
        ({"top_p": 1.5}, "top_p", "invalid_value"),
        ({"seed": 1.5}, "seed", "invalid_type"),
        ({"n": 0}, "n", "invalid_value"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "invalid_value"),
        ({"max_completion_tokens": 0}, "max_completion_tokens", "invalid_value"),
        ({"max_completion_tokens": 600}, "max_completion_tokens", "rule_violation"),
        ({"max_tokens": 5, "max_completion_tokens": 6}, "max_tokens", "invalid_value"),
        (
            {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"},
            "tools",
            "unsupported_parameter",
        ),
        ({"response_format": {"type": "json_object"}}, "response_format", "unsupported_parameter"),
        ({"logprobs": True}, "logprobs", "unsupported_parameter"),
        ({"frequency_penalty": 0.5}, "frequency_penalty", "unsupported_parameter"),
        ({"presence_penalty": 1}, "presence_penalty", "unsupported_parameter"),
        ({"logit_bias": {"5": 10}}, "logit_bias", "unsupported_parameter"),
        ({"extra_body": {"top_k": 3}}, "top_k", "unknown_parameter"),
        ({"stream_options": {"include_usage": True}}, "stream_options", "invalid_value"),
    ]
    with serving(service) as url:
        client = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
        caught = []
        for extra, _, _ in bad:
            with pytest.raises(openai.BadRequestError) as error:
                client.chat.completions.create(model="tiny", messages=USER, **extra)
            caught.append(error.value)
        with pytest.raises(openai.BadRequestError) as legacy:
            client.completions.create(model="tiny", prompt=PROMPT, echo=True)
        long_prompt = " ".join(["indemnity clause payment"] * 700)
        with pytest.raises(openai.BadRequestError) as too_long:
            client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": long_prompt}], max_tokens=16
            )
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="tmk_nope", max_retries=0).completions.create(
                model="tiny", prompt=PROMPT
            )
        with pytest.raises(openai.PermissionDeniedError) as forbidden:
            openai.OpenAI(base_url=url, api_key=revoked.secret, max_retries=0).completions.create(
                model="tiny", prompt=PROMPT
            )
    assert [(e.body["param"], e.code) for e in caught] == [(p, c) for _, p, c in bad]  # type: ignore[index]
    assert (legacy.value.code, legacy.value.body["param"]) == ("unsupported_parameter", "echo")  # type: ignore[index]
    assert too_long.value.code == "context_length_exceeded" and "2048 tokens" in too_long.value.message
    assert too_long.value.body["param"] == "messages"  # type: ignore[index]
    assert forbidden.value.code == "api_key_revoked"
    spooled = records(service)
    assert len(spooled) == len(bad) + 2  # each refusal after authentication; none for the bad keys
    assert {(r["status"], r["tokens_in"], r["tokens_out"], r["expert_tokens"]) for r in spooled} == {
        ("rejected", 0, 0, 0)
    }
    assert record(service, too_long.value.request_id or "")["status"] == "rejected"


def test_an_exhausted_quota_is_one_429_the_sdk_does_not_retry(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    harness, key = agent(live_server, tiny_model, tmp_path, quota_tokens=10)
    service = harness.agent.service
    with serving(service) as url:
        client = openai.OpenAI(base_url=url, api_key=key)  # the SDK's default retries (2)
        started = time.monotonic()
        with pytest.raises(openai.RateLimitError) as limited:
            client.completions.create(model="tiny", prompt=PROMPT, max_tokens=16)
    headers = limited.value.response.headers
    assert headers["x-should-retry"] == "false" and int(headers["retry-after"]) > 0
    assert limited.value.code == "insufficient_quota" and time.monotonic() - started < 5
    assert [r["status"] for r in records(service)] == ["rejected"]  # one call, one record


def test_stop_n_seed_and_temperature_are_honoured_and_only_delivered_text_billed(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    harness, key = agent(live_server, tiny_model, tmp_path)
    service = harness.agent.service
    with serving(service) as url:
        client = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
        whole = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=40, temperature=0)
        full = whole.choices[0].text
        stop = full[len(full) // 2 : len(full) // 2 + 3]
        cut = client.completions.create(
            model="tiny", prompt=PROMPT, max_tokens=40, temperature=0, stop=[stop]
        )
        sampled = [
            client.chat.completions.create(model="tiny", messages=USER, max_tokens=12, n=2, seed=7)
            for _ in range(2)
        ]
        greedy = client.chat.completions.create(
            model="tiny", messages=USER, max_tokens=12, n=2, temperature=0
        )
        unseeded = client.chat.completions.create(model="tiny", messages=USER, max_tokens=12, temperature=1.5)
    assert cut.choices[0].text == full[: full.index(stop)] and cut.choices[0].finish_reason == "stop"
    assert whole.usage is not None and cut.usage is not None
    assert cut.usage.completion_tokens < whole.usage.completion_tokens
    billed = record(service, cut._request_id or "")
    assert billed["tokens_out"] == cut.usage.completion_tokens and billed["status"] == "ok"
    assert billed["expert_tokens"] == (billed["tokens_in"] + billed["tokens_out"] - 1) * 2 * 3
    first, again = ([c.message.content for c in s.choices] for s in sampled)
    assert first == again and len(first) == 2 and first[0] != first[1]  # one seed, two choices
    assert greedy.choices[0].message.content == greedy.choices[1].message.content
    assert unseeded.choices[0].message.content not in first
    two = record(service, sampled[0]._request_id or "")
    assert sampled[0].usage is not None and two["tokens_out"] == sampled[0].usage.completion_tokens == 24
    assert two["tokens_in"] == sampled[0].usage.prompt_tokens  # the prompt counts once


def test_streams_start_with_the_role_and_end_with_usage_only_when_asked(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    harness, key = agent(live_server, tiny_model, tmp_path)
    service = harness.agent.service
    with serving(service) as url:
        client = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
        whole = client.chat.completions.create(model="tiny", messages=USER, max_tokens=10, temperature=0)
        plain = client.chat.completions.create(
            model="tiny", messages=USER, max_tokens=10, temperature=0, stream=True
        )
        plain_chunks = list(plain)
        counted = client.completions.create(
            model="tiny",
            prompt=PROMPT,
            max_tokens=10,
            stream=True,
            stream_options={"include_usage": True},
        )
        counted_chunks = list(counted)
    assert plain_chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in plain_chunks) == whole.choices[0].message.content
    assert (
        all(c.usage is None for c in plain_chunks) and plain_chunks[-1].choices[0].finish_reason == "length"
    )
    record_id = plain.response.headers["x-request-id"]
    assert {c.id for c in plain_chunks} == {"chatcmpl-" + record_id}
    assert record(service, record_id)["tokens_out"] == 10
    last = counted_chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert all(c.usage is None for c in counted_chunks[:-1]) and counted_chunks[-2].choices[0].finish_reason
    stored = record(service, counted.response.headers["x-request-id"])
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (
        stored["tokens_in"],
        stored["tokens_out"],
    )
    assert last.usage.prompt_tokens_details is not None
    assert last.usage.prompt_tokens_details.cached_tokens == stored["prefix_cache_hit_tokens"]


def test_a_client_that_hangs_up_stops_generation_and_its_record_says_so(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    harness, key = agent(live_server, tiny_model, tmp_path)
    service = harness.agent.service
    with serving(service) as url:
        client = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
        stream = client.chat.completions.create(
            model="tiny", messages=USER, max_tokens=300, temperature=0, stream=True
        )
        received = [next(stream), next(stream)]
        stream.close()
        streamed = record(service, stream.response.headers["x-request-id"])
        impatient = openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=0.5)
        with pytest.raises(openai.APITimeoutError):
            impatient.completions.create(model="tiny", prompt=PROMPT, max_tokens=500, temperature=0)
        deadline = time.monotonic() + 30
        while len(records(service)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        whole = records(service)[-1]
    assert received[0].choices[0].delta.role == "assistant"
    assert streamed["status"] == "cancelled" and 0 < streamed["tokens_out"] < 100
    assert streamed["expert_tokens"] == (streamed["tokens_in"] + streamed["tokens_out"] - 1) * 2 * 3
    assert whole["status"] == "cancelled" and 0 < whole["tokens_out"] < 500  # cut at 0.5 s, not run out
