"""TreeScheduler's rules on a driven clock, each at its boundaries: the tree config and its errors (by
line), the subtree's priority line, borrowing (85 % against 84.9 % and exactly 85 %, 3 periods against
2, the lender's queue, 15 minutes against 14:59, 70 %) and the P99 autoscaler (200 / 250 / 150 ms,
3 and 5 periods, the bounds)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from compute_agents.scheduler.autoscaler import P99Autoscaler
from compute_agents.scheduler.borrowing import Borrowing, SubtreeLoad
from compute_agents.scheduler.config import TreeConfig, TreeConfigError
from compute_agents.scheduler.events import BORROW, RETURN, SCALE_DOWN, SCALE_UP, SchedulerEvent
from compute_agents.scheduler.queue import PriorityLine, QueueFull

CONFIG = """\
version: 1
subtrees:
  finance:
    kind: inference
    executors: [f-1, f-2]
    sla: {p99_ms: 300, max_concurrency: 8}
    replicas: {min: 2, max: 10}
    fallback: cpu
    priorities:
      - {package: finance-qa, sla_class: gold, priority: 9}
      - {package: '*', sla_class: internal, priority: 3}
  batch:
    kind: batch
    executors: [b-1, b-2, b-3]
    sla: {p99_ms: 5000, max_concurrency: 4}
    queue: 8
  vault:
    kind: inference
    isolation: strict
    executors: [v-1, v-2]
    sla: {p99_ms: 300, max_concurrency: 4}
  cpu:
    kind: inference
    executors: [c-1]
    sla: {p99_ms: 2000, max_concurrency: 2}
"""


@pytest.fixture
def config() -> TreeConfig:
    return TreeConfig.parse(CONFIG)


def test_the_config_reads_subtrees_priorities_and_defaults(config: TreeConfig, tmp_path: Path) -> None:
    finance = config.subtrees["finance"]
    assert (finance.kind, finance.executors, finance.p99_ms, finance.max_concurrency) == (
        "inference",
        ("f-1", "f-2"),
        300,
        8,
    )
    assert (finance.min_replicas, finance.max_replicas, finance.fallback, finance.queue) == (2, 10, "cpu", 64)
    assert finance.priority("finance-qa", "gold") == 9
    assert finance.priority("anything", "internal") == 3
    assert finance.priority("anything", "standard") == 5  # no rule: the middle
    assert config.subtrees["batch"].queue == 8 and config.subtrees["batch"].max_replicas == 3
    assert not config.subtrees["vault"].lends and config.subtrees["batch"].lends
    assert config.settings.period_s == 10 and config.settings.return_after_s == 900
    path = tmp_path / "tree-config.yaml"
    path.write_text(
        CONFIG.replace("version: 1\n", "version: 1\nscheduler: {period_s: 5, borrow_periods: 4}\n")
    )
    loaded = TreeConfig.load(path)
    assert (loaded.settings.period_s, loaded.settings.borrow_periods) == (5, 4)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("kind: batch", "kind: gpu"),
            r":13: subtrees\.batch\.kind: must be one of inference, training, batch",
        ),
        (("queue: 8", "queue: -1"), r":16: subtrees\.batch\.queue: must be an integer of at least 0"),
        (
            ("    queue: 8\n", "    queue: 8\n    colour: red\n"),
            r":17: subtrees\.batch: unknown setting 'colour'",
        ),
        (
            ("priority: 9", "priority: 10"),
            r":10: subtrees\.finance\.priorities\[0\]\.priority: must be 0\.\.9",
        ),
        (("fallback: cpu", "fallback: gpu"), r":8: subtrees\.finance\.fallback: no subtree 'gpu'"),
        (("executors: [c-1]", "executors: [f-1]"), r":24: subtrees\.cpu\.executors: 'f-1' is already in"),
        (("{min: 2, max: 10}", "{min: 4, max: 3}"), r":7: subtrees\.finance\.replicas: min 4 is above max 3"),
        (("    sla: {p99_ms: 2000, max_concurrency: 2}\n", ""), r":23: subtrees\.cpu: 'sla' is required"),
        (("version: 1", "version: 2"), r":1: version: must be 1"),
        (("  vault:", "  'bad name!':"), r":17: subtrees: 'bad name!' is not a subtree name"),
        (("max_concurrency: 8}", "max_concurrency: 8"), r"tree-config\.yaml:\d+: not YAML"),
    ],
)
def test_config_errors_name_the_line_and_the_setting(change: tuple[str, str], message: str) -> None:
    broken = CONFIG.replace(*change)
    assert broken != CONFIG
    with pytest.raises(TreeConfigError, match=message):
        TreeConfig.parse(broken)


def test_the_line_serves_priority_then_age_and_refuses_when_full() -> None:
    line: PriorityLine[str] = PriorityLine(bound=4)
    line.push("internal-old", priority=3, arrived=1.0)
    line.push("finance-late", priority=9, arrived=5.0)
    line.push("finance-early", priority=9, arrived=2.0)
    line.push("standard", priority=5, arrived=0.5)
    with pytest.raises(QueueFull, match="4 requests already wait"):
        line.push("finance-vip", priority=9, arrived=6.0)  # nothing waiting is pushed out for it
    assert len(line) == 4
    assert [line.pop() for _ in range(5)] == [
        "finance-early",
        "finance-late",
        "standard",
        "internal-old",
        None,
    ]
    same: PriorityLine[str] = PriorityLine(bound=3)
    for name in ("a", "b", "c"):
        same.push(name, priority=5, arrived=7.0)  # the same instant: in arrival order
    assert same.remove("b") and not same.remove("b")
    assert [same.pop(), same.pop()] == ["a", "c"]


def _loads(**shares: tuple[float, int]) -> dict[str, SubtreeLoad]:
    """Each subtree's load as (share of 1,000 capacity, queued), spread over its config's executors."""
    executors = {
        "finance": ["f-1", "f-2"],
        "batch": ["b-1", "b-2", "b-3"],
        "vault": ["v-1", "v-2"],
        "cpu": ["c-1"],
    }
    loads = {}
    for name, members in executors.items():
        share, queued = shares.get(name, (0.0, 0))
        in_flight = round(share * 1000)
        spread = {
            e: in_flight // len(members) + (i < in_flight % len(members)) for i, e in enumerate(members)
        }
        loads[name] = SubtreeLoad(spread, 1000, queued)
    return loads


def test_a_subtree_borrows_after_three_periods_above_85_percent(config: TreeConfig) -> None:
    borrowing = Borrowing(config)
    for now in (0, 10):  # two periods at 90 %: not yet
        assert borrowing.tick(now, _loads(finance=(0.9, 0))) == []
    [event] = borrowing.tick(20, _loads(finance=(0.851, 0), batch=(0.3, 1)))
    assert (event.kind, event.subtree, event.lender) == (BORROW, "finance", "batch")
    assert event.executor == "b-1"  # the batch subtree's least busy executor (first of equals)
    assert event.figures == {
        "load": 0.851,
        "periods": 3.0,
        "lender_load": 0.3,
        "lender_queue": 1.0,
        "executors": 1.0,
    }
    assert borrowing.serving("b-1", "batch") == "finance" and borrowing.serving("b-2", "batch") == "batch"
    for now in (30, 40, 50, 60):  # still hot, but one unit at most
        assert borrowing.tick(now, _loads(finance=(0.99, 0))) == []


@pytest.mark.parametrize("share", [0.85, 0.849])
def test_85_percent_or_under_is_not_hot(config: TreeConfig, share: float) -> None:
    borrowing = Borrowing(config)
    assert not any(borrowing.tick(now, _loads(finance=(share, 0))) for now in range(0, 100, 10))


def test_a_break_in_the_streak_starts_it_again(config: TreeConfig) -> None:
    borrowing = Borrowing(config)
    for now, share in ((0, 0.9), (10, 0.9), (20, 0.8), (30, 0.9), (40, 0.9)):
        assert borrowing.tick(now, _loads(finance=(share, 0))) == []
    assert [e.kind for e in borrowing.tick(50, _loads(finance=(0.9, 0)))] == [BORROW]


def test_a_unit_of_several_executors_leaves_the_lender_one(config: TreeConfig) -> None:
    units = Borrowing(TreeConfig(config.subtrees, replace(config.settings, unit_executors=5)))
    for now in (0, 10):
        units.tick(now, _loads(finance=(0.9, 0)))
    [event] = units.tick(20, _loads(finance=(0.9, 0)))
    assert event.executor == "b-1,b-2" and event.figures["executors"] == 2  # batch keeps b-3


def test_a_lender_keeps_enough_to_stay_under_85_percent(config: TreeConfig) -> None:
    """batch at 56.7 % on 3 executors would be at 85.05 % on the 2 it keeps: it lends nothing; at
    56.6 % (84.9 % on two) it lends."""
    for lender_share, lends in ((0.567, False), (0.566, True)):
        borrowing = Borrowing(config)
        loads = {"finance": (0.95, 0), "batch": (lender_share, 0), "vault": (0.0, 0)}
        events = [e for now in (0, 10, 20) for e in borrowing.tick(now, _loads(**loads))]
        assert bool(events) is lends, lender_share
        if lends:
            assert events[0].lender == "batch"


def test_no_lender_with_a_queue_of_two_strict_subtrees_never_lend_or_borrow(config: TreeConfig) -> None:
    borrowing = Borrowing(config)
    hot_and_queued = {"finance": (0.95, 0), "batch": (0.1, 2)}  # batch's queue is 2: not under 2
    assert not any(borrowing.tick(now, _loads(**hot_and_queued)) for now in range(0, 60, 10))
    strict = Borrowing(config)  # vault (strict) is hot; it borrows nothing
    assert not any(strict.tick(now, _loads(vault=(0.99, 0), batch=(0.0, 0))) for now in range(0, 60, 10))
    only_vault = Borrowing(config)  # finance is hot, batch is busy, cpu has one executor: vault never lends
    loads = {"finance": (0.95, 0), "batch": (0.9, 0), "vault": (0.0, 0)}
    assert not any(only_vault.tick(now, _loads(**loads)) for now in range(0, 60, 10))


def test_the_unit_goes_back_under_70_percent_and_not_before_15_minutes(config: TreeConfig) -> None:
    borrowing = Borrowing(config)
    for now in (0, 10, 20):
        borrowing.tick(now, _loads(finance=(0.9, 0)))
    [loan] = borrowing.loans
    assert (loan.executors, loan.since) == (("b-1",), 20)
    assert borrowing.tick(20 + 899, _loads(finance=(0.1, 0))) == []  # 14:59 held
    assert borrowing.tick(20 + 900, _loads(finance=(0.70, 0))) == []  # 15:00, but 70 % is not under
    [back] = borrowing.tick(20 + 900, _loads(finance=(0.699, 0)))
    assert (back.kind, back.executor, back.subtree, back.lender) == (RETURN, "b-1", "finance", "batch")
    assert back.figures == {"load": 0.699, "held_s": 900.0, "executors": 1.0}
    assert borrowing.serving("b-1", "batch") == "batch" and not borrowing.loans


def _autoscaler(
    config: TreeConfig, p99_by_period: list[float], replicas: int, subtree: str = "finance"
) -> tuple[P99Autoscaler, list[SchedulerEvent], int]:
    """One answer per period at the given latency, with a window of one period (so each period's P99 is
    that answer's); tick each period and apply its steps."""
    scaler = P99Autoscaler(TreeConfig(config.subtrees, replace(config.settings, window_s=10)))
    events = []
    for period, latency in enumerate(p99_by_period):
        now = 10.0 * (period + 1)
        scaler.observe(subtree, now - 1, latency)
        for event in scaler.tick(now, {subtree: replicas}):
            events.append(event)
            replicas = int(event.figures["desired"])
    return scaler, events, replicas


def test_p99_above_200_ms_for_three_periods_scales_up_a_third(config: TreeConfig) -> None:
    _, events, replicas = _autoscaler(config, [201, 201], 3)
    assert events == [] and replicas == 3  # two periods: not yet
    _, events, replicas = _autoscaler(config, [200, 200, 200, 200], 3)
    assert events == []  # 200 ms is not above 200 ms
    scaler, events, replicas = _autoscaler(config, [201, 201, 201], 3)
    [up] = events
    assert (up.kind, up.figures["replicas"], up.figures["desired"], replicas) == (SCALE_UP, 3, 4, 4)
    assert "above 200 ms for 3 periods (+33%)" in up.reason
    assert scaler.log[-1].above == 3 and scaler.log[-1].desired == 4


def test_p99_above_250_ms_doubles_within_the_bounds(config: TreeConfig) -> None:
    _, [up], replicas = _autoscaler(config, [260, 260, 251], 3)
    assert replicas == 6 and "above 250 ms: +100%" in up.reason
    _, events, replicas = _autoscaler(config, [300] * 9, 3)
    assert [int(e.figures["desired"]) for e in events] == [6, 10]  # 12 held to max 10; then stays
    assert replicas == 10


def test_no_step_up_while_the_last_steps_replicas_warm_up(config: TreeConfig) -> None:
    scaler = P99Autoscaler(TreeConfig(config.subtrees, replace(config.settings, window_s=10)))
    steps = []
    for period in range(1, 9):
        now = 10.0 * period
        scaler.observe("finance", now - 1, 300.0)
        warming = {"finance": 2} if period in (6, 7) else {}
        steps += [(period, int(e.figures["desired"])) for e in scaler.tick(now, {"finance": 4}, warming)]
    # Period 3 steps up; at 6 and 7 the streak is long enough but two replicas still warm up; 8 steps.
    assert steps == [(3, 8), (8, 8)]
    assert [p.above for p in scaler.log] == [1, 2, 3, 1, 2, 3, 4, 5]


def test_p99_under_150_ms_for_five_periods_scales_down_a_quarter(config: TreeConfig) -> None:
    _, events, _ = _autoscaler(config, [149] * 4, 8)
    assert events == []
    _, events, _ = _autoscaler(config, [150] * 9, 8)
    assert events == []  # 150 is not under 150
    _, [down], replicas = _autoscaler(config, [149] * 5, 8)
    assert (down.kind, replicas) == (SCALE_DOWN, 6) and "under 150 ms for 5 periods" in down.reason
    _, events, replicas = _autoscaler(config, [100] * 30, 8)
    assert [int(e.figures["desired"]) for e in events] == [6, 5, 4, 3, 2] and replicas == 2  # min 2


def test_the_band_between_150_and_200_ms_breaks_both_streaks(config: TreeConfig) -> None:
    _, events, _ = _autoscaler(config, [201, 201, 180, 201, 201], 3)
    assert events == []
    _, events, _ = _autoscaler(config, [149, 149, 149, 149, 175, 149, 149, 149, 149], 8)
    assert events == []


def test_the_window_is_the_last_60_seconds_and_p99_is_the_nearest_rank(config: TreeConfig) -> None:
    scaler = P99Autoscaler(config)
    for i in range(200):
        scaler.observe("finance", 1.0 + i * 0.25, float(i + 1))  # 1..200 ms over 50 s
    assert scaler.p99("finance", 51.0) == 198.0  # ceil(0.99 × 200) = 198th smallest
    assert scaler.p99("finance", 100.0) == 200.0  # only the answers of the last 60 s (from 40 s on)
    assert scaler.p99("finance", 200.0) is None
    assert scaler.p99("batch", 10.0) is None
