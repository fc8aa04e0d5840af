"""The OpenAI-compatible shapes on the wire: errors, the request body as parsed, answers and stream chunks.

Only shapes: no engine, no quota, no record. Checks here run in the order a client sees their errors.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from treemeter_records.limits import FORBIDDEN_CONTROL, TEXT_MAX

from .engine import Generation

CHAT_ROUTE = "/v1/chat/completions"


class ApiError(Exception):
    """An answer in OpenAI's error shape."""

    def __init__(self, status: int, kind: str, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.code, self.message, self.param = status, kind, code, message, param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class CompletionRequest:
    """A body that passed the format's checks."""

    max_tokens: int
    prompt: str | list[dict[str, str]]  # a completion's prompt, or a chat's messages


def parse_request(route: str, body: Any) -> CompletionRequest:
    """The body's format, as OpenAI's API states it (the rules file's checks come after)."""
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_request_error", "invalid_body", "The body must be a JSON object.")
    if not isinstance(body.get("stream", False), bool):
        raise ApiError(400, "invalid_request_error", "invalid_value", "stream must be a boolean.", "stream")
    max_tokens = body.get("max_tokens", 16)
    if type(max_tokens) is not int or max_tokens < 1:
        raise ApiError(
            400,
            "invalid_request_error",
            "invalid_value",
            "max_tokens must be a positive integer.",
            "max_tokens",
        )
    if route == CHAT_ROUTE:
        messages = body.get("messages")
        if (
            not isinstance(messages, list)
            or not messages
            or not all(
                isinstance(m, dict)
                and m.get("role") in ("system", "user", "assistant")
                and isinstance(m.get("content"), str)
                for m in messages
            )
        ):
            raise ApiError(
                400,
                "invalid_request_error",
                "invalid_value",
                "messages must be a non-empty list of {role, content}, role system, user or assistant.",
                "messages",
            )
        request = CompletionRequest(max_tokens, messages)
    else:
        given = body.get("prompt")
        if not isinstance(given, str) or not given:
            raise ApiError(
                400,
                "invalid_request_error",
                "invalid_value",
                "prompt must be a non-empty string.",
                "prompt",
            )
        request = CompletionRequest(max_tokens, given)
    if not isinstance(body.get("model"), str):
        raise ApiError(400, "invalid_request_error", "invalid_value", "model must be a string.", "model")
    return request


def usage(generation: Generation) -> dict[str, int]:
    return {
        "prompt_tokens": generation.tokens_in,
        "completion_tokens": generation.tokens_out,
        "total_tokens": generation.tokens_in + generation.tokens_out,
    }


def treemeter_ref(record: dict[str, Any]) -> dict[str, Any]:
    """The record an answer was metered as."""
    return {"seq": record["seq"], "record_id": record["record_id"]}


def answer(
    route: str, created: int, model: str, generation: Generation, record: dict[str, Any]
) -> dict[str, Any]:
    """A whole completion (not streamed)."""
    if route == CHAT_ROUTE:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": generation.text},
            "finish_reason": generation.finish_reason,
        }
        kind, prefix = "chat.completion", "chatcmpl-"
    else:
        choice = {
            "index": 0,
            "text": generation.text,
            "logprobs": None,
            "finish_reason": generation.finish_reason,
        }
        kind, prefix = "text_completion", "cmpl-"
    return {
        "id": prefix + record["record_id"],
        "object": kind,
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage(generation),
        "treemeter": treemeter_ref(record),
    }


def new_stream_id(route: str) -> str:
    return ("chatcmpl-" if route == CHAT_ROUTE else "cmpl-") + uuid.uuid4().hex


def chunk(
    stream_id: str, route: str, created: int, model: str, text: str, finish: str | None
) -> dict[str, Any]:
    """One server-sent event's payload of a streamed completion."""
    chat = route == CHAT_ROUTE
    if chat:
        choice: dict[str, Any] = {
            "index": 0,
            "delta": {"content": text} if text else {},
            "finish_reason": finish,
        }
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    return {
        "id": stream_id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": [choice],
    }


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def new_client_request_id(header: str | None) -> str:
    """The caller's x-request-id as the record's client_request_id: cut to the format's length, without the
    control characters the format refuses; a fresh id when there is none."""
    given = "".join(ch for ch in (header or "")[:TEXT_MAX] if ch not in FORBIDDEN_CONTROL)
    return given or f"req-{uuid.uuid4().hex}"
