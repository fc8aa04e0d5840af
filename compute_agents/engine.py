"""The engine interface the agent serves through, and the torch engine (a real MoE forward pass on CPU).

Expert activations come from the model's own routers: each ``layers[i].mlp.gate`` returns
``(logits, weights, indices)`` and the MoE block hands ``indices`` to its experts module, which the L2
cache replaces; that module keeps the indices it was given (the experts that really ran). This costs
less than a forward hook on the gate (no hook dispatch per layer and step) and reads the same tensor.
Per request they are laid out ``[tokens-1, moe_layers, top_k]``
(every position the model ran a forward pass for: the prompt, then each generated token but the last),
the same layout as vLLM's routed experts.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from .checkpoint import chat_prompt, read_manifest, verify_weights
from .expert_cache import CachedExperts, CacheStats, ExpertCache


@dataclass(frozen=True)
class Generation:
    """What one request used, as measured."""

    text: str
    tokens_in: int
    tokens_out: int
    finish_reason: str  # "stop" or "length"
    routed: torch.Tensor  # [tokens-1, moe_layers, top_k] expert ids
    l2_us: int  # preheat and expert loads
    l3_us: int  # forward passes, expert loads excluded
    prefix_cache_hit_tokens: int = 0
    expert_cache_hits: int = 0
    expert_cache_misses: int = 0


class RoutingCaptureInvalid(RuntimeError):
    """The engine's routing for a request cannot be billed (missing, malformed, or all zeros)."""


class Engine(Protocol):
    model_id: str
    weights_sha3: str
    moe_layers: int
    num_experts: int
    top_k: int

    def count_tokens(self, prompt: str) -> int: ...

    def chat_prompt(self, messages: list[dict[str, str]]) -> str: ...

    def generate(
        self,
        prompt: str,
        max_tokens: int,
        *,
        use_l2: bool = True,
        on_text: Callable[[str], None] | None = None,
    ) -> Generation: ...


class PromptLayout:
    """What every engine does to a request before its forward pass, written once: a chat's messages
    laid out as the checkpoint's prompt (``checkpoint.chat_prompt``), and a prompt's tokens counted by
    the engine's own tokenizer (the worst case the quota reserves). Engines set ``tokenizer``."""

    tokenizer: Any

    def count_tokens(self, prompt: str) -> int:
        return len(self.tokenizer(prompt)["input_ids"])

    def chat_prompt(self, messages: list[dict[str, str]]) -> str:
        return chat_prompt(messages)


@dataclass(frozen=True)
class CheckpointIdentity:
    """A checkpoint's model id and weights fingerprint, the latter checked against its manifest."""

    manifest: dict[str, Any]
    model_id: str
    weights_sha3: str

    @classmethod
    def load(cls, directory: Path) -> CheckpointIdentity:
        manifest = read_manifest(directory)
        weights_sha3 = verify_weights(directory, manifest)
        return cls(manifest, str(manifest["model_id"]), weights_sha3)


def expert_counts(routed: torch.Tensor, num_experts: int) -> list[dict[str, int]]:
    """Per (layer, expert) activation counts, the record's ``experts`` list (sorted, no zeros)."""
    experts: list[dict[str, int]] = []
    for layer in range(routed.shape[1]):
        counts = torch.bincount(routed[:, layer, :].flatten(), minlength=num_experts).tolist()
        experts.extend(
            {"layer": layer, "expert": expert, "tokens": n} for expert, n in enumerate(counts) if n
        )
    return experts


class TorchEngine(PromptLayout):
    """A Qwen3-MoE checkpoint from a local directory, one request at a time (a lock serialises them)."""

    def __init__(
        self,
        directory: Path,
        *,
        cache_capacity: int | None = None,
        preheat: int | None = None,
        capture: bool = True,
        threads: int | None = None,
        on_integrity_error: Any = None,
    ) -> None:
        from transformers import AutoTokenizer, Qwen3MoeForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        if threads:
            torch.set_num_threads(threads)
        checkpoint = CheckpointIdentity.load(directory)
        manifest = checkpoint.manifest
        self.weights_sha3, self.model_id = checkpoint.weights_sha3, checkpoint.model_id
        self.tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        self.model = Qwen3MoeForCausalLM.from_pretrained(directory, local_files_only=True).eval()
        config = self.model.config
        self.moe_layers = config.num_hidden_layers
        self.num_experts = config.num_experts
        self.top_k = config.num_experts_per_tok
        capacity = cache_capacity or self.num_experts
        self.cache = ExpertCache(
            directory,
            manifest["experts"],
            layers=self.moe_layers,
            capacity=capacity,
            on_integrity_error=on_integrity_error,
        )
        self.preheat = capacity // 2 if preheat is None else preheat
        self.blocks: list[CachedExperts] = []
        for index, layer in enumerate(self.model.model.layers):
            block = CachedExperts(layer.mlp.experts, index, self.cache)
            layer.mlp.experts = block
            self.blocks.append(block)
        self._captured: list[list[torch.Tensor]] = [[] for _ in range(self.moe_layers)]
        self.capture = capture
        if capture:
            for block, captured in zip(self.blocks, self._captured, strict=True):
                block.captured = captured
        self.lock = threading.Lock()

    def generate(
        self,
        prompt: str,
        max_tokens: int,
        *,
        use_l2: bool = True,
        on_text: Callable[[str], None] | None = None,
    ) -> Generation:
        """Greedy generation; ``on_text`` receives the decoded text piece by piece as it is produced."""
        with self.lock, torch.inference_mode():
            return self._generate(prompt, max_tokens, use_l2, on_text)

    def _generate(
        self, prompt: str, max_tokens: int, use_l2: bool, on_text: Callable[[str], None] | None
    ) -> Generation:
        input_ids = self.tokenizer(prompt, return_tensors="pt")["input_ids"]
        for captured in self._captured:
            captured.clear()
        for block in self.blocks:
            block.bypass = not use_l2
        before = self.cache.stats.copy()
        l2_started = time.perf_counter_ns()
        if use_l2:
            self.cache.preheat(self.preheat)
        preheat_ns = time.perf_counter_ns() - l2_started
        load_before = self.cache.stats.load_ns
        started = time.perf_counter_ns()
        output = self.model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=max_tokens,
            do_sample=False,
            pad_token_id=self.tokenizer.pad_token_id,
            streamer=None if on_text is None else _TextCallback(self.tokenizer, on_text),
        )
        forward_ns = time.perf_counter_ns() - started
        load_ns = self.cache.stats.load_ns - load_before
        new_ids = output[0, input_ids.shape[1] :]
        eos = self.tokenizer.eos_token_id
        finish = "stop" if len(new_ids) and int(new_ids[-1]) == eos else "length"
        text = str(self.tokenizer.decode(new_ids, skip_special_tokens=True))
        if self.capture:
            routed = torch.stack([torch.cat(c) for c in self._captured], dim=1)
            self.cache.observe(
                Counter(
                    {(e["layer"], e["expert"]): e["tokens"] for e in expert_counts(routed, self.num_experts)}
                )
            )
        else:
            routed = torch.empty((0, self.moe_layers, self.top_k), dtype=torch.long)
        after = self.cache.stats
        stats = CacheStats(after.hits - before.hits, after.misses - before.misses)
        return Generation(
            text=text,
            tokens_in=int(input_ids.shape[1]),
            tokens_out=len(new_ids),
            finish_reason=finish,
            routed=routed,
            l2_us=(preheat_ns + load_ns) // 1000,
            l3_us=(forward_ns - load_ns) // 1000,
            expert_cache_hits=stats.hits,
            expert_cache_misses=stats.misses,
        )


def _TextCallback(tokenizer: Any, on_text: Callable[[str], None]) -> Any:
    """transformers' TextStreamer, handing each finalised piece of text to ``on_text``."""
    from transformers import TextStreamer

    class Streamer(TextStreamer):
        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            if text:
                on_text(text)

    return Streamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
