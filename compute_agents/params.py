"""The request body of /v1/completions and /v1/chat/completions, checked field by field as OpenAI's API
states it: every field is honoured, accepted without effect on the answer (listed), or refused with
400 ``unsupported_parameter`` naming it; a field OpenAI does not have is 400 ``unknown_parameter``.
docs/agent.md has the table. The rules file's checks and the model's limits come after (admission)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .engine import SamplingParams
from .wire import CHAT_ROUTE, ApiError

HONOURED = frozenset(
    {"model", "max_tokens", "n", "stop", "stream", "stream_options", "temperature", "top_p", "seed"}
)
HONOURED_CHAT = frozenset({"messages", "max_completion_tokens"})
HONOURED_COMPLETION = frozenset({"prompt"})
# Accepted and without effect on what is generated or billed: identifiers and caching hints.
NO_EFFECT = frozenset({"user", "safety_identifier", "prompt_cache_key"})
# Not implemented: refused unless absent, null, or one of the values that asks for nothing.
UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (0,),
    "presence_penalty": (0,),
    "logit_bias": ({},),
    "logprobs": (False,),
}
UNSUPPORTED_CHAT: dict[str, tuple[Any, ...]] = {
    "top_logprobs": (),
    "tools": ([],),
    "tool_choice": ("none",),
    "parallel_tool_calls": (),
    "functions": ([],),
    "function_call": ("none",),
    "response_format": ({"type": "text"},),
    "audio": (),
    "modalities": (["text"],),
    "prediction": (),
    "web_search_options": (),
    "reasoning_effort": (),
    "verbosity": (),
    "store": (False,),
    "metadata": ({},),
    "service_tier": ("auto", "default"),
    "prompt_cache_retention": (),
}
UNSUPPORTED_COMPLETION: dict[str, tuple[Any, ...]] = {"best_of": (1,), "echo": (False,), "suffix": ("",)}
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
MAX_N = 128
MAX_STOP = 4
SEED_RANGE = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class CompletionRequest:
    """A body that passed the format's checks."""

    model: str
    prompt: str | list[dict[str, str]]  # a completion's prompt, or a chat's messages (text only)
    sampling: SamplingParams
    n: int
    stream: bool
    include_usage: bool
    limit_param: str  # the field the output limit came from: max_tokens or max_completion_tokens


def invalid(param: str, message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, "invalid_request_error", code, message, param)


def unsupported(param: str, message: str = "") -> ApiError:
    return invalid(param, message or f"'{param}' is not supported by this agent.", "unsupported_parameter")


def parse_request(route: str, body: Any) -> CompletionRequest:
    """The body's format, as OpenAI's API states it (the rules file's checks come after)."""
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_request_error", "invalid_body", "The body must be a JSON object.")
    chat = route == CHAT_ROUTE
    _check_fields(body, chat)
    stream = _boolean(body, "stream", False)
    limit_param, max_tokens = _limit(body, chat)
    temperature = _number(body, "temperature", 0.0, 2.0, 1.0)
    top_p = _number(body, "top_p", 0.0, 1.0, 1.0)
    sampling = SamplingParams(max_tokens, temperature, top_p, _seed(body), _stop(body))
    if (n := _integer(body, "n", 1, MAX_N)) is None:
        n = 1
    prompt = _messages(body) if chat else _prompt(body)
    if not isinstance(body.get("model"), str):
        raise invalid("model", "model must be a string.", "invalid_type")
    return CompletionRequest(
        body["model"], prompt, sampling, n, stream, _include_usage(body, stream), limit_param
    )


def _check_fields(body: dict[str, Any], chat: bool) -> None:
    honoured = HONOURED | (HONOURED_CHAT if chat else HONOURED_COMPLETION)
    refused = UNSUPPORTED | (UNSUPPORTED_CHAT if chat else UNSUPPORTED_COMPLETION)
    for name in body:
        if name not in honoured and name not in NO_EFFECT and name not in refused:
            raise invalid(name, f"Unrecognized request argument supplied: {name}", "unknown_parameter")
    for name, allowed in refused.items():  # in the table's order, whatever the body's
        value = body.get(name)
        if value is not None and not any(_same(value, ok) for ok in allowed):
            raise unsupported(name)


def _same(value: Any, allowed: Any) -> bool:
    """Equal and of the same JSON type (``0 == False`` in Python, not in JSON)."""
    if isinstance(allowed, bool) or isinstance(value, bool):
        return value is allowed
    return bool(value == allowed)


def _boolean(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(name, f"{name} must be a boolean.", "invalid_type")
    return value


def _integer(body: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if type(value) is not int:
        raise invalid(name, f"{name} must be an integer.", "invalid_type")
    if not low <= value <= high:
        raise invalid(name, f"{name} must be between {low} and {high}, not {value}.")
    return value


def _number(body: dict[str, Any], name: str, low: float, high: float, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if type(value) not in (int, float):
        raise invalid(name, f"{name} must be a number.", "invalid_type")
    if not low <= value <= high:
        raise invalid(name, f"{name} must be between {low:g} and {high:g}, not {value}.")
    return float(value)


def _limit(body: dict[str, Any], chat: bool) -> tuple[str, int]:
    """The output limit and the field it came from; 16 tokens when neither is given."""
    given = {
        name: value
        for name in (("max_completion_tokens", "max_tokens") if chat else ("max_tokens",))
        if (value := _integer(body, name, 1, 2**31 - 1)) is not None
    }
    if len(set(given.values())) > 1:
        raise invalid("max_tokens", "max_tokens and max_completion_tokens differ: give one of them.")
    name = next(iter(given), "max_tokens")
    return name, given.get(name, 16)


def _seed(body: dict[str, Any]) -> int | None:
    return _integer(body, "seed", *SEED_RANGE)


def _stop(body: dict[str, Any]) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    sequences = [value] if isinstance(value, str) else value
    if (
        not isinstance(sequences, list)
        or len(sequences) > MAX_STOP
        or not all(isinstance(s, str) and s for s in sequences)
    ):
        raise invalid("stop", f"stop must be a non-empty string or a list of at most {MAX_STOP} of them.")
    return tuple(sequences)


def _include_usage(body: dict[str, Any], stream: bool) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not stream:
        raise invalid("stream_options", "stream_options is only allowed when stream is true.")
    if not isinstance(options, dict):
        raise invalid("stream_options", "stream_options must be an object.", "invalid_type")
    for name, value in options.items():
        param = f"stream_options.{name}"
        if name not in ("include_usage", "include_obfuscation"):
            raise invalid(param, f"Unrecognized stream option: {name}", "unknown_parameter")
        if not isinstance(value, bool):
            raise invalid(param, f"{param} must be a boolean.", "invalid_type")
    if options.get("include_obfuscation"):
        raise unsupported("stream_options.include_obfuscation", "The agent does not pad stream chunks.")
    return bool(options.get("include_usage", False))


def _prompt(body: dict[str, Any]) -> str:
    given = body.get("prompt")
    if isinstance(given, list):
        raise unsupported(  # several prompts, or token ids
            "prompt", "prompt must be one string: several prompts or token ids are not supported."
        )
    if not isinstance(given, str) or not given:
        raise invalid("prompt", "prompt must be a non-empty string.")
    return given


def _messages(body: dict[str, Any]) -> list[dict[str, str]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "messages must be a non-empty list of {role, content}.")
    return [_message(index, message) for index, message in enumerate(messages)]


def _message(index: int, message: Any) -> dict[str, str]:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise invalid(where, f"{where} must be an object with role and content.", "invalid_type")
    for name in message:
        if name not in ("role", "content"):
            raise unsupported(f"{where}.{name}")
    role = message.get("role")
    if role in ("tool", "function"):
        raise unsupported(f"{where}.role", f"Messages of role {role} are not supported (no tools).")
    if role not in ROLES:
        raise invalid(f"{where}.role", "role must be system, developer, user or assistant.")
    return {"role": ROLES[role], "content": _content(where, message.get("content"))}


def _content(where: str, content: Any) -> str:
    """A message's text: a string, or a list of text parts joined (other parts are refused)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise invalid(f"{where}.content", f"{where}.content must be a string or a list of text parts.")
    texts = []
    for index, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise unsupported(f"{where}.content[{index}]", "Only text content parts are supported.")
        texts.append(part["text"])
    return "".join(texts)
