"""The engine interface the agent serves through, and the torch engine (a real MoE forward pass on CPU).

Expert activations come from the model's own routers: each ``layers[i].mlp.gate`` returns
``(logits, weights, indices)`` and the MoE block hands ``indices`` to its experts module, which the L2
cache replaces; that module keeps the indices it was given (the experts that really ran). This costs
less than a forward hook on the gate (no hook dispatch per layer and step) and reads the same tensor.
Per request they are laid out ``[tokens-1, moe_layers, top_k]``
(every position the model ran a forward pass for: the prompt, then each generated token but the last),
the same layout as vLLM's routed experts. Requests run concurrently on one model (up to ``workers`` at a
time): each thread's request keeps its own routing and cache counts (``expert_cache.RequestUse``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from .checkpoint import MANIFEST, ExpertBlocks, chat_prompt, verify_weights
from .decoding import Sampler, StepWatch, tokens_for_text
from .expert_cache import CachedExperts, CacheStats, ExpertCache, RequestUse
from .host import memory_in_use
from .manifest_signature import ManifestTrust, signed_manifest


@dataclass(frozen=True)
class SamplingParams:
    """How one choice is decoded. ``temperature`` 0 (or ``top_p`` 0) is greedy; the text stops before
    the first of ``stop``."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_p == 0


@dataclass(frozen=True)
class Generation:
    """What one request used, as measured."""

    text: str  # what is delivered: up to a stop sequence, never past it
    tokens_in: int
    tokens_out: int  # the tokens of the delivered text (a stop sequence's are not counted)
    finish_reason: str  # "stop" or "length"; "cancelled" when the client went away
    routed: torch.Tensor  # [tokens-1, moe_layers, top_k] expert ids
    l2_us: int  # preheat and expert loads
    l3_us: int  # forward passes, expert loads excluded
    prefix_cache_hit_tokens: int = 0  # prompt tokens read from the engine's prefix cache
    prefix_cache_write_tokens: int = 0  # prompt tokens it stored there (new full cache blocks)
    expert_cache_hits: int = 0
    expert_cache_misses: int = 0


class RoutingCaptureInvalid(RuntimeError):
    """The engine's routing for a request cannot be billed (missing, malformed, or all zeros)."""


class Engine(Protocol):
    model_id: str
    served_names: tuple[str, ...]  # the model id first, then the checkpoint's aliases
    created: int  # Unix seconds: when the checkpoint was made
    max_model_len: int  # prompt and output tokens together
    weights_sha3: str
    moe_layers: int
    num_experts: int
    top_k: int

    def count_tokens(self, prompt: str) -> int: ...

    def resident_experts(self) -> dict[int, list[int]]:
        """MoE layer → the experts whose weights are in memory now (what a heartbeat reports)."""
        ...

    def chat_prompt(self, messages: list[dict[str, str]]) -> str: ...

    def generate(
        self,
        prompt: str,
        sampling: SamplingParams,
        *,
        use_l2: bool = True,
        preheat: Sequence[tuple[int, int]] = (),
        on_text: Callable[[str], None] | None = None,
        cancelled: threading.Event | None = None,
    ) -> Generation:
        """One choice; ``preheat`` names the (layer, expert) pairs an L1 router asks L2 to load first
        (none: the engine's own prediction), ``on_text`` gets the delivered text piece by piece,
        ``cancelled`` ends generation after the step during which it is set (``finish_reason``
        "cancelled")."""
        ...


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
    """A checkpoint's model id and weights fingerprint, the latter checked against its manifest, whose
    publisher signature is checked first (``manifest_signature``): a refused manifest loads nothing."""

    manifest: dict[str, Any]
    model_id: str
    weights_sha3: str
    served_names: tuple[str, ...]  # the model id, then the manifest's ``aliases``
    created: int  # the manifest's ``created``, else its file's modification time

    @classmethod
    def load(cls, directory: Path, trust: ManifestTrust) -> CheckpointIdentity:
        manifest = signed_manifest(directory, trust)
        weights_sha3 = verify_weights(directory, manifest)
        model_id = str(manifest["model_id"])
        aliases = tuple(str(a) for a in manifest.get("aliases", ()) if a != model_id)
        created = int(manifest.get("created") or (directory / MANIFEST).stat().st_mtime)
        return cls(manifest, model_id, weights_sha3, (model_id, *aliases), created)


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
    """A Qwen3-MoE checkpoint from a local directory; up to ``workers`` requests run at once on it."""

    def __init__(
        self,
        directory: Path,
        *,
        trust: ManifestTrust,
        cache_capacity: int | None = None,
        preheat: int | None = None,
        capture: bool = True,
        threads: int | None = None,
        workers: int = 4,
        on_integrity_error: Any = None,
        now: Callable[[], float] = time.monotonic,
        memory: Callable[[], float] = memory_in_use,
    ) -> None:
        from transformers import AutoTokenizer, Qwen3MoeForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        if threads:
            torch.set_num_threads(threads)
        checkpoint = CheckpointIdentity.load(directory, trust)
        manifest = checkpoint.manifest
        self.weights_sha3, self.model_id = checkpoint.weights_sha3, checkpoint.model_id
        self.served_names, self.created = checkpoint.served_names, checkpoint.created
        self.tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        self.model = Qwen3MoeForCausalLM.from_pretrained(directory, local_files_only=True).eval()
        config = self.model.config
        self.max_model_len: int = config.max_position_embeddings
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
            blocks=ExpertBlocks.from_manifest(manifest),
            now=now,
        )
        self.preheat = capacity // 2 if preheat is None else preheat
        self.active = threading.local()  # .use: the RequestUse of the request this thread runs
        for index, layer in enumerate(self.model.model.layers):
            layer.mlp.experts = CachedExperts(layer.mlp.experts, index, self.cache, self.active)
        self.capture = capture
        self.workers = threading.BoundedSemaphore(workers)
        self.worker_count = workers
        self.memory = memory  # the host's memory in use, a share
        self.running = 0  # requests holding a worker now: the load share's numerator
        self.running_lock = threading.Lock()

    def generate(
        self,
        prompt: str,
        sampling: SamplingParams,
        *,
        use_l2: bool = True,
        preheat: Sequence[tuple[int, int]] = (),
        on_text: Callable[[str], None] | None = None,
        cancelled: threading.Event | None = None,
    ) -> Generation:
        """One choice, decoded with ``sampling``; see ``Engine.generate``."""
        with self.workers, torch.inference_mode():
            use = RequestUse([[] for _ in range(self.moe_layers)] if self.capture else None, not use_l2)
            self.active.use = use
            with self.running_lock:
                self.running += 1
            try:
                return self._generate(prompt, sampling, use, preheat, on_text, cancelled)
            finally:
                with self.running_lock:
                    self.running -= 1
                self.cache.release(use)
                del self.active.use

    def _generate(
        self,
        prompt: str,
        sampling: SamplingParams,
        use: RequestUse,
        preheat: Sequence[tuple[int, int]],
        on_text: Callable[[str], None] | None,
        cancelled: threading.Event | None,
    ) -> Generation:
        from transformers import LogitsProcessorList, StoppingCriteriaList

        input_ids = self.tokenizer(prompt, return_tensors="pt")["input_ids"]
        tokens_in = int(input_ids.shape[1])
        l2_started = time.perf_counter_ns()
        if use_l2 := not use.bypass:
            self._place(use.stats)
            if preheat:
                self.cache.preheat_experts(preheat, use.stats)
            else:
                self.cache.preheat(self.preheat, use.stats)
        preheat_ns = time.perf_counter_ns() - l2_started if use_l2 else 0
        load_before = use.stats.load_ns
        watch = StepWatch(self._decode, tokens_in, sampling.stop, on_text, cancelled)
        sampler = [] if sampling.greedy else [Sampler(sampling.temperature, sampling.top_p, sampling.seed)]
        started = time.perf_counter_ns()
        output = self.model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=sampling.max_tokens,
            do_sample=False,
            pad_token_id=self.tokenizer.pad_token_id,
            logits_processor=LogitsProcessorList(sampler),
            stopping_criteria=StoppingCriteriaList([watch]),
        )
        forward_ns = time.perf_counter_ns() - started
        # Expert loads are the L2 hop's work; on a path without L2 they are part of the L3 time.
        load_ns = use.stats.load_ns - load_before if use_l2 else 0
        new_ids = output[0, tokens_in:].tolist()
        if watch.stop_at is not None:
            text = watch.decode(new_ids)[: watch.stop_at]
            tokens_out, finish = tokens_for_text(self._decode, new_ids, watch.stop_at), "stop"
        else:
            text, tokens_out = self._decode(new_ids), len(new_ids)
            finish = "stop" if new_ids and new_ids[-1] == self.tokenizer.eos_token_id else "length"
        if watch.was_cancelled and finish != "stop":
            finish = "cancelled"
        watch.send(text)
        routed = self._routed(use, tokens_in + tokens_out - 1)
        write_back_ns = self._write_back(routed) if use_l2 else 0
        return Generation(
            text=text,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            finish_reason=finish,
            routed=routed,
            l2_us=(preheat_ns + load_ns + write_back_ns) // 1000,
            l3_us=(forward_ns - load_ns) // 1000,
            # No prefix cache here: every prompt token is computed, none is read from or kept in one.
            prefix_cache_hit_tokens=0,
            prefix_cache_write_tokens=0,
            expert_cache_hits=use.stats.hits,
            expert_cache_misses=use.stats.misses,
        )

    def _place(self, request: CacheStats) -> None:
        """The design's expert placement, first in the L2 step (before the request's own preheat, which has
        the last word): unload the experts idle for a minute; above 85 % of load (requests running, this
        one included, ÷ workers) or of the host's memory in use, evict the low-frequency ones; admit the
        hot ones. (A full cache is not pressure: it is a cache doing its work.)"""
        self.cache.unload_idle()
        self.cache.relieve(self.running / self.worker_count, self.memory())
        self.cache.preheat_frequent(request)

    def _decode(self, token_ids: list[int]) -> str:
        return str(self.tokenizer.decode(token_ids, skip_special_tokens=True))

    def resident_experts(self) -> dict[int, list[int]]:
        with self.cache.lock:
            return {layer: sorted(experts) for layer, experts in enumerate(self.cache.resident)}

    def _routed(self, use: RequestUse, rows: int) -> torch.Tensor:
        """The request's routing, ``rows`` positions (the forward passes of the tokens it is billed)."""
        if use.captured is None:
            return torch.empty((0, self.moe_layers, self.top_k), dtype=torch.long)
        return torch.stack([torch.cat(c) for c in use.captured], dim=1)[:rows]

    def _write_back(self, routed: torch.Tensor) -> int:
        """The L2 hop's write-back: the cache remembers the request's routing for the next preheats.
        Returns its time (ns), counted in the L2 hop with the preheat and the loads."""
        started = time.perf_counter_ns()
        counts = expert_counts(routed, self.num_experts)
        self.cache.observe(Counter({(e["layer"], e["expert"]): e["tokens"] for e in counts}))
        return time.perf_counter_ns() - started
