"""Decoding one request step by step, the parts every engine shares: where a stop sequence cuts the text
and how many tokens the delivered text took, text handed out only once it is final, sampling with the
request's own random generator, and a cancellation checked after every step."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from typing import Any

import torch
from transformers import LogitsProcessor, StoppingCriteria

Decode = Callable[[list[int]], str]


def find_stop(text: str, stop: tuple[str, ...]) -> int | None:
    """Where the earliest stop sequence starts in ``text``, or None."""
    found = [at for sequence in stop if (at := text.find(sequence)) >= 0]
    return min(found) if found else None


def tokens_for_text(decode: Decode, token_ids: list[int], length: int) -> int:
    """How many of the generated tokens produce the first ``length`` characters of their text: the tokens
    of a stop sequence are not counted, a token the delivered text ends inside is."""
    if length <= 0:
        return 0
    for count in range(1, len(token_ids) + 1):
        if len(decode(token_ids[:count])) >= length:
            return count
    return len(token_ids)


class StepWatch(StoppingCriteria):
    """Called after every decoding step: ends generation on a stop sequence or a cancellation, and hands
    ``on_text`` the text that can no longer change (not a possible start of a stop sequence, not half a
    character)."""

    def __init__(
        self,
        decode: Decode,
        prompt_tokens: int,
        stop: tuple[str, ...],
        on_text: Callable[[str], None] | None,
        cancelled: threading.Event | None,
    ) -> None:
        self.decode, self.prompt_tokens, self.stop = decode, prompt_tokens, stop
        self.on_text, self.cancelled = on_text, cancelled
        self.hold = max((len(s) for s in stop), default=1) - 1
        self.sent = 0
        self.stop_at: int | None = None
        self.was_cancelled = False

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        text = self.decode(input_ids[0, self.prompt_tokens :].tolist())
        self.stop_at = find_stop(text, self.stop) if self.stop else None
        if self.stop_at is not None:
            self.send(text[: self.stop_at])
        elif self.on_text is not None:
            final = len(text) - self.hold - (1 if text.endswith("\ufffd") else 0)
            self.send(text[:final])
        self.was_cancelled = self.cancelled is not None and self.cancelled.is_set()
        done = self.stop_at is not None or self.was_cancelled
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool)  # type: ignore[return-value]

    def send(self, delivered: str) -> None:
        """Hand out what of ``delivered`` was not sent yet."""
        if self.on_text is not None and len(delivered) > self.sent:
            self.on_text(delivered[self.sent :])
            self.sent = len(delivered)


class Sampler(LogitsProcessor):
    """Temperature and nucleus (top-p) sampling with the request's own generator (seeded by ``seed``), so
    concurrent requests neither share nor disturb one random state. It leaves one finite logit, the token
    drawn, for the greedy search to take."""

    def __init__(self, temperature: float, top_p: float, seed: int | None) -> None:
        self.temperature, self.top_p = temperature, top_p
        self.generator = torch.Generator().manual_seed(seed if seed is not None else secrets.randbits(63))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        probs = torch.softmax(scores.float() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            ranked, order = probs.sort(dim=-1, descending=True)
            ranked = ranked * ((ranked.cumsum(dim=-1) - ranked) < self.top_p)  # the first always stays
            probs = torch.zeros_like(probs).scatter(-1, order, ranked)
        drawn = torch.multinomial(probs, 1, generator=self.generator)
        chosen = torch.full_like(scores, float("-inf")).scatter(-1, drawn, 0.0)
        return chosen  # type: ignore[return-value]
