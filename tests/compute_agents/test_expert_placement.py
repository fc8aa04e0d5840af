"""The design's expert placement in the L2 cache, on a clock the tests drive: an expert with 3 accesses in
60 s is admitted (LRU-K admission), one idle for 60 s is unloaded, and above 85 % of load or memory the
low-frequency experts are evicted; each rule at its boundary, then all of them in a real generation."""

from __future__ import annotations

from pathlib import Path

import pytest

from compute_agents.checkpoint import read_manifest
from compute_agents.engine import TorchEngine
from compute_agents.expert_cache import ExpertCache, RequestUse
from compute_agents.host import memory_in_use
from tests.compute_agents.model_sizes import SIZES, greedy
from tests.compute_agents.publisher import trust

START = 1000.0


class Clock:
    """Seconds, as the test sets them."""

    def __init__(self) -> None:
        self.t = START

    def __call__(self) -> float:
        return self.t


def cache_for(model: Path, clock: Clock, capacity: int) -> ExpertCache:
    return ExpertCache(
        model, read_manifest(model)["experts"], layers=SIZES.layers, capacity=capacity, now=clock
    )


def access(cache: ExpertCache, counts: dict[int, int], request: RequestUse | None = None) -> None:
    """Layer 0: each expert accessed ``counts[expert]`` times, now."""
    for expert, n in counts.items():
        for _ in range(n):
            cache.get(0, expert, request)


def test_three_accesses_in_a_minute_are_hot_two_are_not(tiny_model: Path) -> None:
    clock = Clock()
    cache = cache_for(tiny_model, clock, capacity=2)
    access(cache, {1: 3, 2: 2})
    cache.resident[0].clear()
    assert (cache.frequency(0, 1), cache.frequency(0, 2)) == (3, 2)
    assert cache.preheat_frequent() == 1 and set(cache.resident[0]) == {1}
    assert cache.frequency(0, 1) == 3  # a preheat load is not an access
    assert cache.stats.hot_preheats == 1 and cache.stats.preheat_loads == 0


def test_an_access_60_s_old_has_left_the_window(tiny_model: Path) -> None:
    clock = Clock()
    cache = cache_for(tiny_model, clock, capacity=2)
    access(cache, {1: 3})
    cache.resident[0].clear()
    clock.t = START + 59.9
    assert cache.frequency(0, 1) == 3
    clock.t = START + 60.0
    assert cache.frequency(0, 1) == 0
    assert cache.preheat_frequent() == 0 and not cache.resident[0]


def test_idle_60_s_unloads_59_9_s_does_not(tiny_model: Path) -> None:
    clock = Clock()
    cache = cache_for(tiny_model, clock, capacity=2)
    access(cache, {1: 1})
    cache.preheat_experts([(1, 4)])  # a load starts the idle clock too
    clock.t = START + 59.9
    assert cache.unload_idle() == 0
    assert set(cache.resident[0]) == {1} and set(cache.resident[1]) == {4}
    clock.t = START + 60.0
    assert cache.unload_idle() == 2 and not cache.resident[0] and not cache.resident[1]
    assert cache.stats.idle_unloads == 2


@pytest.mark.parametrize("pressed", ["load", "memory"])
def test_above_85_percent_the_least_frequent_go_down_to_half_the_capacity(
    tiny_model: Path, pressed: str
) -> None:
    clock = Clock()
    cache = cache_for(tiny_model, clock, capacity=4)
    access(cache, {0: 3, 1: 2, 2: 1})
    clock.t = START + 1
    access(cache, {3: 1})

    def relieve(share: float) -> int:
        return cache.relieve(share, 0.0) if pressed == "load" else cache.relieve(0.0, share)

    assert relieve(0.85) == 0 and set(cache.resident[0]) == {0, 1, 2, 3}
    assert relieve(0.851) == 2  # the two with one access, the longer untouched first: 2 and 3
    assert set(cache.resident[0]) == {0, 1} and cache.stats.pressure_evictions == 2


def test_a_hot_expert_is_never_evicted_for_pressure(tiny_model: Path) -> None:
    clock = Clock()
    cache = cache_for(tiny_model, clock, capacity=2)
    access(cache, {0: 3, 1: 3})
    assert cache.relieve(1.0, 1.0) == 0  # both hot: the layer stays above half its capacity
    assert set(cache.resident[0]) == {0, 1}


def test_admission_keeps_to_the_capacity_and_evicts_only_less_frequent_experts(tiny_model: Path) -> None:
    clock = Clock()
    cache = cache_for(tiny_model, clock, capacity=2)
    access(cache, {0: 5, 1: 4, 2: 3, 3: 3, 4: 3})
    cache.resident[0].clear()
    access(cache, {5: 1})
    # 0 fills the free place, 1 evicts 5 (1 access < 4), 2-4 find only more frequent experts resident.
    assert cache.preheat_frequent() == 2 and set(cache.resident[0]) == {0, 1}
    cache.resident[0].clear()
    assert cache.preheat_frequent() == 2 and set(cache.resident[0]) == {0, 1}  # the most frequent first
    assert all(len(resident) <= 2 for resident in cache.resident)


def test_no_rule_drops_an_expert_a_request_in_flight_has_used(tiny_model: Path) -> None:
    clock = Clock()
    cache = cache_for(tiny_model, clock, capacity=2)
    access(cache, {0: 3, 1: 3})
    cache.resident[0].clear()
    request = RequestUse(captured=None)
    access(cache, {5: 1}, request)
    assert cache.preheat_frequent() == 1 and set(cache.resident[0]) == {0, 5}  # 1 may not evict 5
    assert cache.relieve(1.0, 1.0) == 0
    clock.t = START + 61
    assert cache.unload_idle() == 1 and set(cache.resident[0]) == {5}
    cache.release(request)
    assert cache.unload_idle() == 1 and not cache.resident[0]


def test_a_routers_preheat_takes_free_and_cold_places_never_a_hot_ones(tiny_model: Path) -> None:
    clock = Clock()
    cache = cache_for(tiny_model, clock, capacity=2)
    access(cache, {1: 3, 2: 1})  # layer 0 full: 1 hot, 2 not
    # 3 takes 2's place; 4 finds none: 1 is hot, and 3 was asked for in this very call.
    assert cache.preheat_experts([(0, 3), (0, 4)]) == 1 and set(cache.resident[0]) == {1, 3}
    assert cache.stats.preheat_loads == 1
    # An empty layer: the free places, first asked first; the third finds only this call's experts.
    assert cache.preheat_experts([(1, 5), (1, 6), (1, 7)]) == 2 and set(cache.resident[1]) == {5, 6}
    # Resident already: nothing loaded. Hot everywhere: nothing evicted.
    assert cache.preheat_experts([(0, 3)]) == 0
    access(cache, {3: 3})
    assert cache.preheat_experts([(0, 9)]) == 0 and set(cache.resident[0]) == {1, 3}
    # A cold expert a request in flight has used stays too.
    request = RequestUse(captured=None)
    cache.get(1, 5, request)
    cache.get(1, 6, request)
    assert cache.preheat_experts([(1, 7)]) == 0 and set(cache.resident[1]) == {5, 6}
    cache.release(request)
    assert cache.preheat_experts([(1, 7)]) == 1 and len(cache.resident[1]) == 2 and 7 in cache.resident[1]


def test_a_generation_admits_hot_experts_and_unloads_idle_ones(tiny_model: Path) -> None:
    clock = Clock()
    engine = TorchEngine(
        tiny_model, trust=trust(tiny_model), cache_capacity=SIZES.experts, preheat=0, now=clock
    )
    cache = engine.cache
    engine.generate("the contract review clause party agreement", greedy(10))
    hot = {
        (layer, expert)
        for layer in range(SIZES.layers)
        for expert in range(SIZES.experts)
        if cache.frequency(layer, expert) >= 3
    }
    assert hot
    for resident in cache.resident:
        resident.clear()  # as if other traffic had taken their places
    clock.t = START + 1
    engine.generate("patient doctor", greedy(1))
    assert cache.stats.hot_preheats == len(hot)  # the second request's L2 step loaded them
    assert all(expert in cache.resident[layer] for layer, expert in hot)
    before = engine.resident_experts()
    clock.t = START + 62  # everything resident was last touched at START + 1
    third = engine.generate("nurse", greedy(1))
    assert cache.stats.idle_unloads == sum(map(len, before.values()))
    after = engine.resident_experts()  # only what the third request used was loaded again
    assert after == {layer: sorted(set(third.routed[:, layer].flatten().tolist())) for layer in after}
    assert any(set(before[layer]) - set(after[layer]) for layer in before)


def test_a_full_engine_is_under_pressure(tiny_model: Path) -> None:
    """One worker busy is a load share of 1: each L2 step evicts the low-frequency experts."""
    clock = Clock()
    engine = TorchEngine(
        tiny_model, trust=trust(tiny_model), cache_capacity=SIZES.experts, preheat=0, workers=1, now=clock
    )
    engine.generate("the contract review clause party agreement", greedy(10))
    engine.generate("patient doctor", greedy(1))
    assert engine.cache.stats.pressure_evictions > 0 and engine.running == 0


@pytest.mark.parametrize(("in_use", "evicts"), [(0.85, False), (0.851, True)])
def test_the_hosts_memory_above_85_percent_is_pressure(tiny_model: Path, in_use: float, evicts: bool) -> None:
    """Four workers and one request (load 0.25): only the host's memory decides; a cache full to its
    capacity is not pressure by itself."""
    engine = TorchEngine(
        tiny_model,
        trust=trust(tiny_model),
        cache_capacity=SIZES.experts,
        preheat=0,
        workers=4,
        now=Clock(),
        memory=lambda: in_use,
    )
    engine.generate("the contract review clause party agreement", greedy(10))
    engine.generate("patient doctor", greedy(1))
    assert (engine.cache.stats.pressure_evictions > 0) is evicts


def test_the_hosts_memory_in_use_is_read_from_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(
        "MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:    6000000 kB\n"
    )
    assert memory_in_use(meminfo) == pytest.approx(0.75)
    meminfo.write_text("MemTotal:       24000000 kB\n")
    assert memory_in_use(meminfo) == 0.0  # the kernel does not say: no pressure on a guess
    assert memory_in_use(tmp_path / "absent") == 0.0
    assert 0.0 < memory_in_use() < 1.0  # this machine's
