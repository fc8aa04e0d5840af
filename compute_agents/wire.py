"""The OpenAI-compatible shapes on the wire: errors, answers and stream chunks (the request body is
``params``). Only shapes: no engine, no quota, no record."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from treemeter_records.limits import FORBIDDEN_CONTROL, TEXT_MAX
from treemeter_records.validation import PREFIX_CACHE_WRITE_TOKENS

CHAT_ROUTE = "/v1/chat/completions"


class ApiError(Exception):
    """An answer in OpenAI's error shape, with the headers it needs (Retry-After, x-should-retry)."""

    def __init__(
        self,
        status: int,
        kind: str,
        code: str,
        message: str,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.code, self.message, self.param = status, kind, code, message, param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.kind, self.code, self.param)


def error_body(message: str, kind: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def usage(record: dict[str, Any]) -> dict[str, Any]:
    """What the record bills, in OpenAI's usage shape (with the measured prefix-cache hits, and the
    prompt tokens written into the prefix cache: the record's optional field, 0 when absent)."""
    return {
        "prompt_tokens": record["tokens_in"],
        "completion_tokens": record["tokens_out"],
        "total_tokens": record["tokens_in"] + record["tokens_out"],
        "prompt_tokens_details": {
            "cached_tokens": record["prefix_cache_hit_tokens"],
            "cache_write_tokens": record.get(PREFIX_CACHE_WRITE_TOKENS, 0),
        },
    }


def treemeter_ref(record: dict[str, Any], receipt: str | None) -> dict[str, Any]:
    """The record an answer was metered as, and its receipt (treemeter_records.receipts) when the agent
    signs them."""
    ref = {"seq": record["seq"], "record_id": record["record_id"]}
    return ref if receipt is None else {**ref, "receipt": receipt}


def response_id(route: str, record_id: str) -> str:
    """The answer's (or the stream's) id: the record id, prefixed as OpenAI does."""
    return ("chatcmpl-" if route == CHAT_ROUTE else "cmpl-") + record_id


def answer(
    route: str,
    created: int,
    model: str,
    choices: Sequence[tuple[str, str]],
    record: dict[str, Any],
    receipt: str | None,
) -> dict[str, Any]:
    """A whole completion (not streamed); ``choices`` are (text, finish reason)."""
    chat = route == CHAT_ROUTE
    return {
        "id": response_id(route, record["record_id"]),
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": index, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
            if chat
            else {"index": index, "text": text, "logprobs": None, "finish_reason": finish}
            for index, (text, finish) in enumerate(choices)
        ],
        "usage": usage(record),
        "treemeter": treemeter_ref(record, receipt),
    }


class Chunks:
    """The chunks of one stream: same id, created and model; ``usage: null`` on each when the client
    asked for a usage chunk at the end (as OpenAI sends them)."""

    def __init__(self, route: str, record_id: str, created: int, model: str, include_usage: bool) -> None:
        self.chat = route == CHAT_ROUTE
        self.head: dict[str, Any] = {
            "id": response_id(route, record_id),
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": created,
            "model": model,
        }
        self.include_usage = include_usage

    def choice(self, index: int, text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
        """A choice's piece of text (``role``: the chat's first chunk, the assistant role) or its finish."""
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            if text:
                delta["content"] = text
            choice: dict[str, Any] = {"index": index, "delta": delta, "finish_reason": finish}
        else:
            choice = {"index": index, "text": text or "", "logprobs": None, "finish_reason": finish}
        return self._chunk([choice])

    def usage(self, record: dict[str, Any]) -> dict[str, Any]:
        """The last chunk with ``stream_options.include_usage``: no choices, the record's usage."""
        return {**self.head, "choices": [], "usage": usage(record)}

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chunk = {**self.head, "choices": choices}
        if self.include_usage:
            chunk["usage"] = None
        return chunk


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def new_client_request_id(header: str | None, record_id: str) -> str:
    """The caller's x-request-id as the record's client_request_id: cut to the format's length, without the
    control characters the format refuses; ``req-<record id>`` when there is none."""
    given = "".join(ch for ch in (header or "")[:TEXT_MAX] if ch not in FORBIDDEN_CONTROL)
    return given or f"req-{record_id}"
