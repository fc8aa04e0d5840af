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
counts as K uses of each: an expert just predicted is not the next victim. The experts an L1 router asks
for (``preheat_experts``) are the domain's, predicted across the tree: they take free slots and the places
of experts that are not hot here, never a hot one's.

Placement, on the clock ``now`` (seconds; tests drive it). Each ``get`` is one access of its expert; a
preheat load is none. An expert's frequency is its accesses in the last ``WINDOW_S`` (60 s): an access at
time t counts while now − t < 60, so one exactly 60 s old has left the window. Three rules, which never
drop an expert that a request in flight has used (``get`` pins it for the request until ``release``; only
the capacity's LRU-K eviction, which must make room for a miss or a request's own preheat, may):

- ``preheat_frequent`` (LRU-K admission): every expert with ≥ ``HOT_ACCESSES`` (3) accesses in the window
  that is not resident is loaded, the most frequent first.
- ``unload_idle``: a resident expert neither accessed nor loaded for ``IDLE_S`` (60 s; now − last ≥ 60) is
  unloaded. Its tensors are freed (``resident`` holds the only reference once no forward pass computes
  with them), so an executor holds only the experts its last minute of traffic touched: the capacity
  bounds the worst case, idle unloading makes the memory follow the traffic.
- ``relieve``: above ``PRESSURE`` (85 %, strictly above) of load or memory, the low-frequency experts (fewer
  than 3 accesses in the window) are evicted, the least frequent first, down to half the capacity per
  layer; a hot expert is never evicted for pressure.

The counts of what the rules did are in the cache's totals (``stats``: ``hot_preheats``,
``idle_unloads``, ``pressure_evictions``).
"""

from __future__ import annotations

import dataclasses
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
WINDOW_S = 60.0  # an expert's frequency: its accesses in the last WINDOW_S seconds
HOT_ACCESSES = 3  # accesses in the window that make an expert hot: admitted, and kept under pressure
IDLE_S = 60.0  # a resident expert neither accessed nor loaded for this long is unloaded
PRESSURE = 0.85  # above this share of load or memory, the low-frequency experts are evicted

Key = tuple[int, int]  # (layer, expert)


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
    """Hits, misses and load time, in the cache's totals and in each request's; the preheat loads and
    what the placement rules did are counted in the totals only."""

    hits: int = 0
    misses: int = 0
    load_ns: int = 0
    preheat_loads: int = 0
    hot_preheats: int = 0
    idle_unloads: int = 0
    pressure_evictions: int = 0

    def copy(self) -> CacheStats:
        return dataclasses.replace(self)


Weights = tuple[torch.Tensor, torch.Tensor]


@dataclass
class RequestUse:
    """One request's use of the experts while it runs (requests run concurrently on one model): the
    router's top-k ids per MoE layer when metering, whether its path skips the L2 hop (no preheat and no
    write-back of its routing; its experts still come through the cache), its own cache counts, and the
    experts it has used so far (pinned in the cache until ``ExpertCache.release``)."""

    captured: list[list[torch.Tensor]] | None
    bypass: bool = False
    stats: CacheStats = field(default_factory=CacheStats)
    experts: set[Key] = field(default_factory=set)


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
        now: Callable[[], float] = time.monotonic,
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
        self.now = now
        self.accesses: dict[Key, deque[float]] = {}  # the times of each expert's accesses in the window
        self.touched: dict[Key, float] = {}  # each expert's last access or load
        self.in_flight: Counter[Key] = Counter()  # how many requests in flight have used each expert
        self.lock = threading.Lock()  # concurrent requests share the cache

    def get(self, layer: int, expert: int, request: RequestUse | None = None) -> Weights:
        """The expert's weights, loading (and maybe evicting) on a miss; counted in the cache's totals and
        in ``request``'s. Once served it is one access (a refused load is none) and, for ``request``,
        pinned until ``release``."""
        key = (layer, expert)
        stats = None if request is None else request.stats
        with self.lock:
            self.clock += 1
            self.uses.setdefault(key, deque(maxlen=LRU_K)).append(self.clock)
            weights = self.resident[layer].get(expert)
            hit = weights is not None
            for counts in (self.stats, stats):
                if counts is not None:
                    counts.hits += hit
                    counts.misses += not hit
            if weights is None:
                weights = self._load(layer, expert, stats)
            now = self.now()
            self.touched[key] = now
            times = self.accesses.setdefault(key, deque())
            times.append(now)
            while now - times[0] >= WINDOW_S:  # the accesses that have left the window
                times.popleft()
            if request is not None and key not in request.experts:
                request.experts.add(key)
                self.in_flight[key] += 1
            return weights

    def release(self, request: RequestUse) -> None:
        """``request`` has ended: the experts it used are no longer pinned for it."""
        with self.lock:
            for key in request.experts:
                self.in_flight[key] -= 1
                if not self.in_flight[key]:
                    del self.in_flight[key]
            request.experts.clear()

    def frequency(self, layer: int, expert: int) -> int:
        """The expert's accesses in the last ``WINDOW_S`` seconds (one exactly that old no longer counts)."""
        with self.lock:
            return self._frequency((layer, expert), self.now())

    def _frequency(self, key: Key, now: float) -> int:
        times = self.accesses.get(key)
        if times is None:
            return 0
        while times and now - times[0] >= WINDOW_S:
            times.popleft()
        if not times:
            del self.accesses[key]
        return len(times)

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
        self.touched[(layer, expert)] = self.now()
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
        """Load the (layer, expert) pairs an L1 router asked for, the first asked first (unknown ones
        skipped), and count each as K uses. The router predicts from the domain's requests across the
        tree, not from this executor's traffic: a prediction takes a layer's free slot, or the place of
        the least frequent resident expert that is not hot here (fewer than ``HOT_ACCESSES`` accesses in
        the window) and that neither a request in flight nor this call has used; it never evicts a hot
        expert. Returns how many were loaded."""
        with self.lock:
            now = self.now()
            asked: set[Key] = set()
            loaded = 0
            for layer, expert in experts:
                key = (layer, expert)
                known = 0 <= layer < len(self.resident) and f"{layer}/{expert}" in self.fingerprints
                if not known or key in asked:
                    continue
                resident = self.resident[layer]
                if expert not in resident:
                    if len(resident) >= self.capacity:
                        cold = (
                            victim
                            for frequency, _, victim in self._evictable(layer, now)
                            if frequency < HOT_ACCESSES and (layer, victim) not in asked
                        )
                        victim = next(cold, None)
                        if victim is None:
                            continue
                        del resident[victim]
                    self._load(layer, expert, request)
                    loaded += 1
                asked.add(key)
                self._preheated(key)
            self.stats.preheat_loads += loaded
            return loaded

    def _preheated(self, key: Key) -> None:
        """A preheated expert counts as K uses now: it is not the next LRU-K victim."""
        self.clock += 1
        self.uses[key] = deque([self.clock] * LRU_K, maxlen=LRU_K)

    def _preheat(self, experts: list[tuple[int, int]], request: CacheStats | None) -> int:
        loaded = 0
        for layer, expert in experts:
            if expert not in self.resident[layer]:
                self._load(layer, expert, request)
                loaded += 1
            self._preheated((layer, expert))
        self.stats.preheat_loads += loaded
        return loaded

    def preheat_frequent(self, request: CacheStats | None = None) -> int:
        """LRU-K admission: load every expert with at least ``HOT_ACCESSES`` accesses in the window that
        is not resident, per layer the most frequent first; each counts as K uses, as any preheat. A full
        layer makes room only by evicting the least frequent resident expert that is less frequent than the
        one coming in and that no request in flight has used; with none, the layer's remaining hot experts
        (no more frequent) are not loaded. So a layer never holds more than ``capacity``, and an expert
        admitted now is never evicted by a later one. Returns how many were loaded."""
        with self.lock:
            now = self.now()
            coming: dict[int, list[tuple[int, int]]] = {}  # layer → (-frequency, expert) of the hot absent
            for layer, expert in [key for key in self.accesses if key[1] not in self.resident[key[0]]]:
                if (count := self._frequency((layer, expert), now)) >= HOT_ACCESSES:
                    coming.setdefault(layer, []).append((-count, expert))
            loaded = 0
            for layer, hot in coming.items():
                resident = self.resident[layer]
                victims = iter(self._evictable(layer, now))
                for negated, expert in sorted(hot):
                    if len(resident) >= self.capacity:
                        victim = next(victims, None)
                        if victim is None or victim[0] >= -negated:
                            break
                        del resident[victim[2]]
                    self._load(layer, expert, request)
                    self._preheated((layer, expert))
                    self.stats.hot_preheats += 1
                    loaded += 1
            return loaded

    def unload_idle(self) -> int:
        """Unload every resident expert neither accessed nor loaded for ``IDLE_S`` seconds (exactly that
        long counts as idle) that no request in flight has used; returns how many."""
        with self.lock:
            now = self.now()
            idle = [
                (layer, expert)
                for layer, resident in enumerate(self.resident)
                for expert in resident
                if now - self.touched[(layer, expert)] >= IDLE_S and not self.in_flight[(layer, expert)]
            ]
            for layer, expert in idle:
                del self.resident[layer][expert]
            self.stats.idle_unloads += len(idle)
            return len(idle)

    def relieve(self, load_share: float, memory_share: float) -> int:
        """Above ``PRESSURE`` (strictly) of either share, evict the resident experts with fewer than
        ``HOT_ACCESSES`` accesses in the window that no request in flight has used, the least frequent
        (then the longest untouched) first, until a layer holds at most half the capacity; a hot expert
        stays even if the layer stays above half. Returns how many were evicted."""
        if load_share <= PRESSURE and memory_share <= PRESSURE:
            return 0
        with self.lock:
            now = self.now()
            evicted = 0
            for layer, resident in enumerate(self.resident):
                excess = len(resident) - self.capacity // 2
                cold = [expert for count, _, expert in self._evictable(layer, now) if count < HOT_ACCESSES]
                for expert in cold[: max(excess, 0)]:
                    del resident[expert]
                    evicted += 1
            self.stats.pressure_evictions += evicted
            return evicted

    def _evictable(self, layer: int, now: float) -> list[tuple[int, float, int]]:
        """(frequency, last touched, expert) of the layer's resident experts that no request in flight has
        used, the least frequent (then the longest untouched) first."""
        return sorted(
            (self._frequency((layer, expert), now), self.touched[(layer, expert)], expert)
            for expert in self.resident[layer]
            if not self.in_flight[(layer, expert)]
        )


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
            gate_up, down = self.cache.get(self.layer, expert, None if use is OUTSIDE_REQUESTS else use)
            top_k_pos, token_idx = torch.where(mask[expert])
            gate, up = nn.functional.linear(hidden_states[token_idx], gate_up).chunk(2, dim=-1)
            out = nn.functional.linear(self.act_fn(gate) * up, down)
            out = out * top_k_weights[token_idx, top_k_pos, None]
            final.index_add_(0, token_idx, out.to(final.dtype))
        return final
