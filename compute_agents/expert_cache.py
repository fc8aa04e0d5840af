"""L2 for the torch engine: an expert-weight cache with at most N experts resident per MoE layer, the
only place expert weights live in memory (the engine drops the checkpoint's merged expert tensors once
it has loaded the model), so an executor's memory for experts is bounded by the capacity.

Every expert lives as one safetensors file; a file is checked against its SHA3-256 fingerprint from the
checkpoint manifest every time it is loaded, and a mismatch refuses the load. Only then, when the
manifest also fingerprints the file in blocks (``checkpoint.BLOCK_BYTES``, 64 KiB), are the blocks of what
was read hashed: the refusal names the first damaged block and its byte range, how many blocks are
damaged, and whether the file was truncated or extended (from which block on). An intact load hashes no
blocks; a manifest written before the blocks refuses as before, naming none.

Eviction is LRU-K with K = 2 (the victim is the resident expert whose second-most-recent use is oldest;
experts used only once go first). A preheat step loads the experts that recent routing predicts, and
counts as K uses of each: an expert just predicted is not the next victim.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_safetensors
from torch import nn

from .checkpoint import BlockDamage, CheckpointError, ExpertBlocks, expert_file

LRU_K = 2


class ExpertIntegrityError(CheckpointError):
    """An expert file does not match its fingerprint: it is never loaded. Where the manifest has block
    fingerprints, ``block``, ``byte_range`` (first and last byte), ``damaged_blocks`` and ``resized_from``
    (the block a truncation or extension starts at, else None) say where; otherwise they are None."""

    def __init__(
        self,
        path: Path,
        layer: int,
        expert: int,
        actual: str,
        expected: str | None,
        damage: BlockDamage | None,
    ) -> None:
        message = f"{path}: SHA3-256 {actual} does not match the manifest ({expected}); load refused."
        if damage is not None:
            first, last = damage.byte_range
            plural = "s" if damage.damaged_blocks != 1 else ""
            message += (
                f" Layer {layer}, expert {expert}: first damaged block {damage.block} (bytes {first}–{last}),"
                f" {damage.damaged_blocks} damaged block{plural}"
            )
            if damage.resized_from is not None:
                change = "truncated" if damage.size < damage.expected_size else "extended"
                message += (
                    f"; the file is {change} from block {damage.resized_from} on ({damage.size} bytes read,"
                    f" {damage.expected_size} in the manifest)"
                )
            message += "."
        super().__init__(message)
        self.path, self.layer, self.expert = path, layer, expert
        self.block = None if damage is None else damage.block
        self.byte_range = None if damage is None else damage.byte_range
        self.damaged_blocks = None if damage is None else damage.damaged_blocks
        self.resized_from = None if damage is None else damage.resized_from


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    load_ns: int = 0
    preheat_loads: int = 0

    def copy(self) -> CacheStats:
        return CacheStats(self.hits, self.misses, self.load_ns, self.preheat_loads)


Weights = tuple[torch.Tensor, torch.Tensor]


@dataclass
class RequestUse:
    """One request's use of the experts while it runs (requests run concurrently on one model): the
    router's top-k ids per MoE layer when metering, whether its path skips the L2 hop (no preheat and no
    write-back of its routing; its experts still come through the cache), its own cache counts."""

    captured: list[list[torch.Tensor]] | None
    bypass: bool = False
    stats: CacheStats = field(default_factory=CacheStats)


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
        blocks: ExpertBlocks | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError("the expert cache holds at least one expert per layer")
        self.directory = directory
        self.fingerprints = fingerprints
        self.blocks = blocks  # only to locate the damage in a refused file
        self.capacity = capacity
        self.resident: list[dict[int, Weights]] = [{} for _ in range(layers)]
        self.uses: dict[tuple[int, int], deque[int]] = {}
        self.clock = 0
        self.stats = CacheStats()
        self.recent: deque[Counter[tuple[int, int]]] = deque(maxlen=history)
        self.on_integrity_error = on_integrity_error
        self.lock = threading.Lock()  # concurrent requests share the cache

    def get(self, layer: int, expert: int, request: CacheStats | None = None) -> Weights:
        """The expert's weights, loading (and maybe evicting) on a miss; counted in the cache's totals and
        in ``request``'s."""
        with self.lock:
            self.clock += 1
            self.uses.setdefault((layer, expert), deque(maxlen=LRU_K)).append(self.clock)
            weights = self.resident[layer].get(expert)
            hit = weights is not None
            for stats in (self.stats, request):
                if stats is not None:
                    stats.hits += hit
                    stats.misses += not hit
            return weights if weights is not None else self._load(layer, expert, request)

    def _load(self, layer: int, expert: int, request: CacheStats | None) -> Weights:
        started = time.perf_counter_ns()
        path = expert_file(self.directory, layer, expert)
        data = path.read_bytes()
        actual = hashlib.sha3_256(data).hexdigest()
        key = f"{layer}/{expert}"
        expected = self.fingerprints.get(key)
        if actual != expected:
            if self.on_integrity_error is not None:
                self.on_integrity_error(layer, expert, str(path))
            damage = None if self.blocks is None else self.blocks.damage(key, data)
            raise ExpertIntegrityError(path, layer, expert, actual, expected, damage)
        tensors = load_safetensors(data)
        weights = (tensors["gate_up_proj"], tensors["down_proj"])
        resident = self.resident[layer]
        if len(resident) >= self.capacity:
            del resident[self._victim(layer)]
        resident[expert] = weights
        elapsed = time.perf_counter_ns() - started
        self.stats.load_ns += elapsed
        if request is not None:
            request.load_ns += elapsed
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
        with self.lock:
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

    def preheat(self, per_layer: int, request: CacheStats | None = None) -> int:
        """Load the experts recent routing predicts that are not resident; returns how many were loaded."""
        with self.lock:
            return self._preheat(self.predicted(min(per_layer, self.capacity)), request)

    def preheat_experts(self, experts: Iterable[tuple[int, int]], request: CacheStats | None = None) -> int:
        """Load the (layer, expert) pairs an L1 router asked for (at most the capacity of a layer, the
        first asked first; unknown ones skipped); returns how many were loaded."""
        taken: Counter[int] = Counter()
        chosen = []
        for layer, expert in experts:
            known = 0 <= layer < len(self.resident) and f"{layer}/{expert}" in self.fingerprints
            if known and taken[layer] < self.capacity:
                chosen.append((layer, expert))
                taken[layer] += 1
        with self.lock:
            return self._preheat(chosen, request)

    def _preheat(self, experts: list[tuple[int, int]], request: CacheStats | None) -> int:
        loaded = 0
        for layer, expert in experts:
            if expert not in self.resident[layer]:
                self._load(layer, expert, request)
                loaded += 1
            self.clock += 1
            self.uses[(layer, expert)] = deque([self.clock] * LRU_K, maxlen=LRU_K)
        self.stats.preheat_loads += loaded
        return loaded


OUTSIDE_REQUESTS = RequestUse(captured=None, bypass=True)


class CachedExperts(nn.Module):
    """Drop-in for transformers' Qwen3MoeExperts: the same computation, weights from the L2 cache. It
    keeps none of the original module's weights: the checkpoint's merged expert tensors are freed.

    Which request is running is thread-local (``active.use``, a ``RequestUse``): its router ids are kept
    when metering, and its cache counts are its own. A forward pass outside any request (a check's own)
    reads through the cache too and keeps nothing.
    """

    def __init__(self, original: Any, layer: int, cache: ExpertCache, active: threading.local) -> None:
        super().__init__()
        self.layer = layer
        self.cache = cache
        self.active = active
        self.num_experts: int = original.num_experts
        self.act_fn = original.act_fn

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        use: RequestUse = getattr(self.active, "use", OUTSIDE_REQUESTS)
        if use.captured is not None:
            use.captured[self.layer].append(top_k_index)
        final = torch.zeros_like(hidden_states)
        mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts).permute(2, 1, 0)
        for expert in mask.sum(dim=(-1, -2)).nonzero().flatten().tolist():
            gate_up, down = self.cache.get(self.layer, expert, None if use is OUTSIDE_REQUESTS else use.stats)
            top_k_pos, token_idx = torch.where(mask[expert])
            gate, up = nn.functional.linear(hidden_states[token_idx], gate_up).chunk(2, dim=-1)
            out = nn.functional.linear(self.act_fn(gate) * up, down)
            out = out * top_k_weights[token_idx, top_k_pos, None]
            final.index_add_(0, token_idx, out.to(final.dtype))
        return final
