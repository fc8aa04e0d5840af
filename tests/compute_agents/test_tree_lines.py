"""The router's waiting lines per subtree (compute_agents.tree.lines): at most min(SLA concurrency,
healthy capacity) requests run; the rest wait by priority then age; a full line refuses; a slot freed
goes to the head of the line, never to a newcomer; a customer who leaves gives up its place."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from compute_agents.scheduler.config import TreeConfig
from compute_agents.tree.lines import QueueFull, Slot, SubtreeLines

CONFIG = TreeConfig.parse(
    """\
version: 1
subtrees:
  finance:
    kind: inference
    executors: [f-1]
    sla: {p99_ms: 300, max_concurrency: 2}
    queue: 3
"""
)


def lines(capacity: int = 4) -> SubtreeLines:
    healthy = Counter({"finance": capacity})
    return SubtreeLines(CONFIG, lambda subtree: healthy[subtree])


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_the_sla_concurrency_or_the_healthy_capacity_whichever_is_lower() -> None:
    assert lines(capacity=4).limit("finance") == 2
    assert lines(capacity=1).limit("finance") == 1
    assert lines(capacity=0).limit("finance") == 0


def test_waiting_by_priority_then_age_and_a_full_line_refuses() -> None:
    async def scenario() -> list[str]:
        subtree = lines()
        running = [await subtree.enter("finance", 5, 0.0) for _ in range(2)]  # the concurrency: 2
        served: list[str] = []

        async def wait(name: str, priority: int, arrived: float) -> Slot:
            slot = await subtree.enter("finance", priority, arrived)
            served.append(name)
            return slot

        tasks = [
            asyncio.create_task(wait("internal", 3, 1.0)),
            asyncio.create_task(wait("finance-late", 9, 3.0)),
            asyncio.create_task(wait("finance-early", 9, 2.0)),
        ]
        await settle()
        assert served == [] and subtree.waiting("finance") == 3
        with pytest.raises(QueueFull):
            await subtree.enter("finance", 9, 4.0)  # the line holds 3
        running[0].release()
        running[0].release()  # once only
        await settle()
        assert served == ["finance-early"] and subtree.running["finance"] == 2
        newcomer = asyncio.create_task(wait("newcomer", 9, 5.0))  # after finance-late, before internal
        await settle()
        assert served == ["finance-early"]
        running[1].release()
        await settle()
        (await tasks[2]).release()  # finance-early done
        await settle()
        (await tasks[1]).release()  # finance-late done
        await settle()
        (await newcomer).release()
        (await tasks[0]).release()  # internal done
        assert subtree.running["finance"] == 0
        return served

    assert asyncio.run(scenario()) == ["finance-early", "finance-late", "newcomer", "internal"]


def test_a_customer_who_leaves_gives_up_the_place_or_passes_the_slot_on() -> None:
    async def scenario() -> None:
        subtree = lines()
        first, second = [await subtree.enter("finance", 5, 0.0) for _ in range(2)]
        gone = asyncio.create_task(subtree.enter("finance", 9, 1.0))
        stays = asyncio.create_task(subtree.enter("finance", 1, 2.0))
        await settle()
        gone.cancel()  # left while waiting: out of the line
        await settle()
        assert subtree.waiting("finance") == 1
        first.release()
        await settle()
        assert stays.done() and subtree.running["finance"] == 2
        handed = asyncio.create_task(subtree.enter("finance", 9, 3.0))
        await settle()
        second.release()  # the slot is handed to ``handed``, whose customer leaves at that moment
        handed.cancel()
        await settle()
        assert subtree.running["finance"] == 1  # the handed slot was passed on, not lost
        (await stays).release()
        assert subtree.running["finance"] == 0

    asyncio.run(scenario())


def test_no_healthy_executor_lets_requests_through_and_unknown_subtrees_have_no_line() -> None:
    async def scenario() -> None:
        dark = lines(capacity=0)
        slots = [await dark.enter("finance", 5, float(i)) for i in range(5)]  # to the router's 503 at once
        assert dark.waiting("finance") == 0
        for slot in slots:
            slot.release()
        free = await dark.enter("legal", 5, 0.0)
        free.release()
        assert dark.running["legal"] == 0

    asyncio.run(scenario())
