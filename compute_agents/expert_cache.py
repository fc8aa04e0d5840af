"""L2 for the torch engine: an expert-weight cache with at most N experts resident per MoE layer.

The other experts live as one safetensors file each; a file is checked against its SHA3-256 fingerprint
from the checkpoint manifest every time it is loaded, and a mismatch refuses the load. Eviction is
LRU-K with K = 2 (the victim is the resident expert whose second-most-recent use is oldest; experts used
only once go first). A preheat step loads the experts that recent routing predicts.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_safetensors
from torch import nn

from .checkpoint import CheckpointError, expert_file

LRU_K = 2


class ExpertIntegrityError(CheckpointError):
    """An expert file does not match its fingerprint: it is never loaded."""


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    load_ns: int = 0
    preheat_loads: int = 0

    def copy(self) -> CacheStats:
        return CacheStats(self.hits, self.misses, self.load_ns, self.preheat_loads)


Weights = tuple[torch.Tensor, torch.Tensor]


class ExpertCache:
    def __init__(
        self,
        directory: Path,
        fingerprints: dict[str, str],
        *,
        layers: int,
        capacity: int,
        history: int = 8,
        on_integrity_error: Callable[[int, int, str], None] | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError("the expert cache holds at least one expert per layer")
        self.directory = directory
        self.fingerprints = fingerprints
        self.capacity = capacity
        self.resident: list[dict[int, Weights]] = [{} for _ in range(layers)]
        self.uses: dict[tuple[int, int], deque[int]] = {}
        self.clock = 0
        self.stats = CacheStats()
        self.recent: deque[Counter[tuple[int, int]]] = deque(maxlen=history)
        self.on_integrity_error = on_integrity_error

    def get(self, layer: int, expert: int) -> Weights:
        """The expert's weights, loading (and maybe evicting) on a miss."""
        self.clock += 1
        self.uses.setdefault((layer, expert), deque(maxlen=LRU_K)).append(self.clock)
        weights = self.resident[layer].get(expert)
        if weights is not None:
            self.stats.hits += 1
            return weights
        self.stats.misses += 1
        return self._load(layer, expert)

    def _load(self, layer: int, expert: int) -> Weights:
        started = time.perf_counter_ns()
        path = expert_file(self.directory, layer, expert)
        data = path.read_bytes()
        actual = hashlib.sha3_256(data).hexdigest()
        expected = self.fingerprints.get(f"{layer}/{expert}")
        if actual != expected:
            if self.on_integrity_error is not None:
                self.on_integrity_error(layer, expert, str(path))
            raise ExpertIntegrityError(
                f"{path}: SHA3-256 {actual} does not match the manifest ({expected}); load refused."
            )
        tensors = load_safetensors(data)
        weights = (tensors["gate_up_proj"], tensors["down_proj"])
        resident = self.resident[layer]
        if len(resident) >= self.capacity:
            del resident[self._victim(layer)]
        resident[expert] = weights
        self.stats.load_ns += time.perf_counter_ns() - started
        return weights

    def _victim(self, layer: int) -> int:
        """LRU-K: the largest backward K-distance; fewer than K uses count as infinitely far."""

        def kth_use(expert: int) -> tuple[int, int]:
            uses = self.uses.get((layer, expert), deque())
            kth = uses[0] if len(uses) == LRU_K else -1
            return (kth, uses[-1] if uses else -1)

        return min(self.resident[layer], key=kth_use)

    def observe(self, counts: Counter[tuple[int, int]]) -> None:
        """Remember one request's routing (layer, expert) → activations, for preheating."""
        self.recent.append(counts)

    def predicted(self, per_layer: int) -> list[tuple[int, int]]:
        """The experts recent requests used most, at most ``per_layer`` per layer."""
        total: Counter[tuple[int, int]] = Counter()
        for counts in self.recent:
            total.update(counts)
        chosen: list[tuple[int, int]] = []
        taken = Counter[int]()
        for (layer, expert), _ in total.most_common():
            if taken[layer] < per_layer:
                chosen.append((layer, expert))
                taken[layer] += 1
        return chosen

    def preheat(self, per_layer: int) -> int:
        """Load the predicted experts that are not resident; returns how many were loaded."""
        loaded = 0
        for layer, expert in self.predicted(min(per_layer, self.capacity)):
            if expert not in self.resident[layer]:
                self._load(layer, expert)
                loaded += 1
        self.stats.preheat_loads += loaded
        return loaded


class CachedExperts(nn.Module):
    """Drop-in for transformers' Qwen3MoeExperts: the same computation, weights from the L2 cache.

    With ``bypass`` set (a policy path that skips L2) it uses the full resident weights instead.
    """

    def __init__(self, original: Any, layer: int, cache: ExpertCache) -> None:
        super().__init__()
        self.layer = layer
        self.cache = cache
        self.num_experts: int = original.num_experts
        self.act_fn = original.act_fn
        self.full_gate_up = original.gate_up_proj.detach()
        self.full_down = original.down_proj.detach()
        self.bypass = False
        self.captured: list[torch.Tensor] | None = None  # the router's top-k ids per call, when metering

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        if self.captured is not None:
            self.captured.append(top_k_index)
        final = torch.zeros_like(hidden_states)
        mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts).permute(2, 1, 0)
        for expert in mask.sum(dim=(-1, -2)).nonzero().flatten().tolist():
            if self.bypass:
                gate_up, down = self.full_gate_up[expert], self.full_down[expert]
            else:
                gate_up, down = self.cache.get(self.layer, expert)
            top_k_pos, token_idx = torch.where(mask[expert])
            gate, up = nn.functional.linear(hidden_states[token_idx], gate_up).chunk(2, dim=-1)
            out = nn.functional.linear(self.act_fn(gate) * up, down)
            out = out * top_k_weights[token_idx, top_k_pos, None]
            final.index_add_(0, token_idx, out.to(final.dtype))
        return final
