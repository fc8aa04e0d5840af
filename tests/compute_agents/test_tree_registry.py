"""The router's registry of executors: heartbeats, staleness, power of two choices and the breaker."""

from __future__ import annotations

import random
from typing import Any

import pytest

from compute_agents.tree.registry import (
    CLOSED,
    HALF_OPEN,
    OPEN,
    Heartbeat,
    HeartbeatError,
    Registry,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def beat(executor: str, *, subtree: str = "default", outstanding: int = 0, **extra: Any) -> Heartbeat:
    body = {
        "executor": executor,
        "url": f"http://127.0.0.1:1/{executor}/",
        "subtree": subtree,
        "model_id": "tiny-moe",
        "weights_sha3": "ab" * 32,
        "served_names": ["tiny-moe"],
        "outstanding": outstanding,
        "resident": {"0": [3, 1], "1": []},
        **extra,
    }
    return Heartbeat.parse(body)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def registry(clock: Clock) -> Registry:
    return Registry(stale_after_s=3.0, cooldown_s=2.0, clock=clock, rng=random.Random(7))


def test_heartbeat_parses_and_normalises() -> None:
    parsed = beat("ex-1")
    assert parsed.url == "http://127.0.0.1:1/ex-1"
    assert parsed.resident == {0: (3, 1), 1: ()}
    bads: list[Any] = [
        {"executor": "x"},
        [],
        {**_body("x"), "outstanding": -1},
        {**_body("x"), "url": "ftp://h"},
    ]
    for bad in bads:
        with pytest.raises(HeartbeatError):
            Heartbeat.parse(bad)


def _body(executor: str) -> dict[str, Any]:
    return {
        "executor": executor,
        "url": "http://h",
        "model_id": "m",
        "weights_sha3": "0" * 64,
        "served_names": ["m"],
        "outstanding": 0,
        "resident": {},
    }


def test_only_fresh_executors_of_the_subtree_serving_the_model_are_healthy(
    registry: Registry, clock: Clock
) -> None:
    registry.heartbeat(beat("ex-1"))
    registry.heartbeat(beat("ex-2", subtree="batch"))
    assert [e.beat.executor for e in registry.healthy("default", "tiny-moe")] == ["ex-1"]
    assert registry.healthy("default", "other-model") == []
    clock.now += 3.5  # ex-1 missed its heartbeats
    assert registry.healthy("default", "tiny-moe") == []
    assert registry.choose("default", "tiny-moe") is None
    registry.heartbeat(beat("ex-1"))
    assert registry.choose("default", "tiny-moe") is not None


def test_power_of_two_choices_picks_the_less_loaded(registry: Registry) -> None:
    registry.heartbeat(beat("busy", outstanding=9))
    registry.heartbeat(beat("idle", outstanding=0))
    chosen = [registry.choose("default", "tiny-moe") for _ in range(20)]
    assert all(e is not None for e in chosen)
    # With two candidates both are always drawn, so the less loaded wins until its in-flight count
    # (the router's own view) passes the busy one's reported load.
    names = [e.beat.executor for e in chosen if e is not None]
    assert names[:9] == ["idle"] * 9
    assert names.count("busy") >= 5
    assert registry.executors["idle"].inflight + registry.executors["busy"].inflight == 20


def test_choose_skips_executors_already_tried(registry: Registry) -> None:
    registry.heartbeat(beat("ex-1"))
    registry.heartbeat(beat("ex-2"))
    first = registry.choose("default", "tiny-moe")
    assert first is not None
    second = registry.choose("default", "tiny-moe", exclude=[first.beat.executor])
    assert second is not None and second.beat.executor != first.beat.executor
    assert registry.choose("default", "tiny-moe", exclude=["ex-1", "ex-2"]) is None


def test_three_failures_open_the_breaker_and_a_half_open_probe_closes_it(
    registry: Registry, clock: Clock
) -> None:
    registry.heartbeat(beat("ex-1"))
    executor = registry.executors["ex-1"]
    for _ in range(2):
        chosen = registry.choose("default", "tiny-moe")
        assert chosen is executor
        registry.finished(executor, ok=False)
    assert executor.breaker.state == CLOSED
    registry.finished(registry.choose("default", "tiny-moe"), ok=False)  # type: ignore[arg-type]
    assert executor.breaker.state == OPEN
    assert registry.choose("default", "tiny-moe") is None

    clock.now += 2.5  # the cooldown is over: one probe may go
    registry.heartbeat(beat("ex-1"))
    probe = registry.choose("default", "tiny-moe")
    assert probe is executor and executor.breaker.state == HALF_OPEN
    assert registry.choose("default", "tiny-moe") is None  # only one probe at a time
    registry.finished(executor, ok=False)  # the probe failed: open again
    assert executor.breaker.state == OPEN

    clock.now += 2.5
    registry.heartbeat(beat("ex-1"))
    probe = registry.choose("default", "tiny-moe")
    assert probe is executor
    registry.finished(executor, ok=True)
    assert executor.breaker.state == CLOSED and executor.breaker.failures == 0
    assert executor.inflight == 0 and executor.served == 1 and executor.failures == 4


def test_a_success_resets_the_consecutive_count(registry: Registry) -> None:
    registry.heartbeat(beat("ex-1"))
    executor = registry.executors["ex-1"]
    for ok in (False, False, True, False, False):
        registry.choose("default", "tiny-moe")
        registry.finished(executor, ok=ok)
    assert executor.breaker.state == CLOSED


def test_snapshot_and_model_card(registry: Registry, clock: Clock) -> None:
    registry.heartbeat(beat("ex-1", outstanding=2))
    clock.now += 10
    card = registry.model_card("tiny-moe")
    assert card is not None and card.weights_sha3 == "ab" * 32  # remembered while stale
    assert registry.served_names() == []  # but not offered
    (row,) = registry.snapshot()
    assert row["executor"] == "ex-1" and row["healthy"] is False and row["outstanding"] == 2
    assert row["resident"] == {"0": [3, 1], "1": []}


def test_cache_affinity_takes_the_executor_holding_most_of_the_domains_experts(registry: Registry) -> None:
    """The domain's predicted experts decide among executors with room: the one holding the most of
    them, whatever the random draws; with none held (or none predicted) the load decides."""
    predicted = [[0, 3], [0, 5], [1, 2]]
    registry.heartbeat(beat("holds-one", resident={"0": [3], "1": []}, capacity=4))
    registry.heartbeat(beat("holds-all", resident={"0": [3, 5], "1": [2]}, capacity=4, outstanding=2))
    registry.heartbeat(beat("holds-none", resident={"0": [9], "1": [9]}, capacity=4))
    for _ in range(20):  # busier (2 of 4) but holding all three: always chosen
        chosen = registry.choose("default", "tiny-moe", affinity=predicted)
        assert chosen is not None and chosen.beat.executor == "holds-all"
        registry.released(chosen)
    assert registry.executors["holds-all"].holds(predicted) == 3
    unheld = [[2, 7]]
    picks = set()
    for _ in range(30):  # nobody holds it: two at random, the less loaded (never the busy one)
        chosen = registry.choose("default", "tiny-moe", affinity=unheld)
        assert chosen is not None
        picks.add(chosen.beat.executor)
        registry.released(chosen)
    assert picks == {"holds-one", "holds-none"}


def test_cache_affinity_gives_way_above_85_percent_load(registry: Registry) -> None:
    """An executor at 85 % of its capacity still takes its domain's requests; above 85 % the load
    decides (17 of 20 in flight is 85 %, 18 of 20 is 90 %)."""
    predicted = [[0, 3]]
    registry.heartbeat(beat("warm", resident={"0": [3]}, capacity=20, outstanding=17))
    registry.heartbeat(beat("cold", resident={"0": [8]}, capacity=20, outstanding=0))
    assert registry.executors["warm"].load_share == 0.85
    chosen = registry.choose("default", "tiny-moe", affinity=predicted)
    assert chosen is not None and chosen.beat.executor == "warm"
    registry.released(chosen)
    registry.heartbeat(beat("warm", resident={"0": [3]}, capacity=20, outstanding=18))
    assert registry.executors["warm"].load_share == 0.9
    for _ in range(10):
        chosen = registry.choose("default", "tiny-moe", affinity=predicted)
        assert chosen is not None and chosen.beat.executor == "cold"
        registry.released(chosen)


def test_a_heartbeat_without_capacity_counts_one_and_a_bad_capacity_is_refused() -> None:
    assert beat("old").capacity == 1
    assert beat("new", capacity=4).capacity == 4
    with pytest.raises(HeartbeatError, match="capacity must be at least 1"):
        beat("bad", capacity=0)


def test_a_subtree_breaker_counts_timeouts_alone_and_lets_one_probe_through(
    registry: Registry, clock: Clock
) -> None:
    """Three timeouts in a row across the subtree's executors open its breaker (refusals do not count,
    nor break the streak; an answer does); after the cooldown one probe goes, whose answer closes it."""
    for name in ("ex-1", "ex-2"):
        registry.heartbeat(beat(name, capacity=8))
    one, two = registry.executors["ex-1"], registry.executors["ex-2"]

    def attempt(executor: Any, *, ok: bool = False, timeout: bool = False) -> None:
        executor.inflight += 1
        registry.finished(executor, ok=ok, timeout=timeout)

    attempt(one, timeout=True)
    attempt(two, timeout=True)
    attempt(one)  # refused: not a timeout
    assert registry.subtree_state("default") == CLOSED and registry.subtree_allows("default")
    attempt(two, ok=True)  # an answer: the streak starts again
    for executor in (one, two, one):
        attempt(executor, timeout=True)
    assert registry.subtree_state("default") == OPEN and not registry.subtree_allows("default")
    assert registry.subtree_state("other") == CLOSED and registry.subtree_allows("other")

    clock.now += 2.5
    assert registry.subtree_allows("default")  # the probe
    assert registry.subtree_state("default") == HALF_OPEN and not registry.subtree_allows("default")
    attempt(two)  # the probe refused, not timed out: it says nothing, another may probe
    assert registry.subtree_allows("default") and not registry.subtree_allows("default")
    attempt(two, ok=True)
    assert registry.subtree_state("default") == CLOSED and registry.subtree_allows("default")
