"""TreeScheduler over a simulated workday at 1,000 executors: the real borrowing and P99-autoscaler code
(``compute_agents.scheduler``) drives simulated executors, three policies side by side.

The serving tree: 10 subtrees of 100 executors each at the start of the day, 4 requests at once per
executor. Five inference subtrees (one ``strict``) peak 9–11 h, three training subtrees 14–16 h, two
batch subtrees run at night. A request holds a slot for 110 ms and is answered in 110 ms times a
log-normal jitter (σ 0.1: P99 139 ms) on an idle executor, stretched by batching as the subtree's
slots fill: × (1 + 0.15 u + 0.6 u⁶) for u the offered share of its slots (P99 150 ms at u = 0.55,
200 ms at 0.9, 243 ms full); beyond full, requests wait.

The simulation steps the scheduler's own period (10 s). In each period and subtree: arrivals from the
day's pattern (with ±10 % noise, seeded), the executors serving it (its own, minus those lent, plus those
borrowed, minus replicas still warming up), and from those the waiting: the Halfin–Whitt approximation
of an M/M/c queue below saturation, a fluid backlog above it. Twenty answers a period are drawn from that
latency distribution and given to the autoscaler (``observe``); ``Borrowing.tick`` and
``P99Autoscaler.tick`` then decide, exactly as in the router. A new replica serves after a 60 s warm-up
check; a replica scaled down leaves at once (it was idle); lent executors are not scaled down.

Reported per policy and subtree kind: utilisation (busy executor-seconds ÷ provisioned, warming replicas
included), the day's P99 latency (request-weighted), SLA attainment (requests answered within their
subtree's P99 objective), borrows, returns, and scaling steps.

    .venv/bin/python bench/scheduler_sim.py [--hours 24] [--seed 7]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0:0] = [str(ROOT)]

from compute_agents.scheduler.autoscaler import P99Autoscaler  # noqa: E402
from compute_agents.scheduler.borrowing import Borrowing, SubtreeLoad  # noqa: E402
from compute_agents.scheduler.config import Subtree, TreeConfig  # noqa: E402
from compute_agents.scheduler.events import BORROW, RETURN, SCALE_DOWN, SCALE_UP  # noqa: E402

EXECUTORS_PER_SUBTREE = 100
SLOTS = 4  # requests at once per executor
SERVICE_S, JITTER = 0.110, 0.1  # an idle executor's answer, and its log-normal spread
SAMPLES = 50  # answers per period given to the autoscaler
WARM_UP_S = 60.0
UNIT = 10  # executors in one unit lent (a rack): one executor is 1 % of a subtree
LATENCY_BINS_MS = 20_000  # the day's latency histogram, 1 ms bins


@dataclass(frozen=True)
class Demand:
    base_rps: float  # requests/s outside the peak
    peak_rps: float
    peak: tuple[float, float]  # hours


INFERENCE = Demand(700, 3_500, (9, 11))
TRAINING = Demand(500, 3_000, (14, 16))
BATCH = Demand(200, 3_000, (0, 6))


def tree() -> tuple[TreeConfig, dict[str, Demand]]:
    kinds = [("inference", INFERENCE)] * 5 + [("training", TRAINING)] * 3 + [("batch", BATCH)] * 2
    names = ["finance", "medical", "legal", "contracts", "vault", "train-a", "train-b", "train-c"]
    names += ["batch-a", "batch-b"]
    subtrees, demand = {}, {}
    for name, (kind, load) in zip(names, kinds, strict=True):
        subtrees[name] = Subtree(
            name=name,
            kind=kind,
            executors=tuple(f"{name}-{i}" for i in range(EXECUTORS_PER_SUBTREE)),
            p99_ms=2_000 if kind == "batch" else 300,
            max_concurrency=SLOTS,
            isolation="strict" if name == "vault" else "shared",
            min_replicas=20,
            max_replicas=250,
        )
        demand[name] = load
    config = TreeConfig(subtrees)
    return TreeConfig(subtrees, replace(config.settings, unit_executors=UNIT)), demand


def rate(load: Demand, hour: float) -> float:
    """Requests/s at ``hour``: the base, rising to the peak over the hour before it, falling after."""
    start, end = load.peak
    if start <= hour < end:
        return load.peak_rps
    ramp = min(abs(hour - start), abs(hour - end))
    return load.base_rps + (load.peak_rps - load.base_rps) * max(0.0, 1 - ramp)


def stretch(share: float) -> float:
    """How much slower a request is answered when ``share`` of its executor's slots are busy."""
    return 1 + 0.15 * share + 0.6 * share**6


def waiting_probability(servers: int, offered: float) -> float:
    """Halfin–Whitt: the chance an arrival waits in an M/M/c queue with ``servers`` and ``offered``
    Erlangs (below saturation)."""
    beta = (servers - offered) / math.sqrt(servers)
    phi = math.exp(-beta * beta / 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + math.erf(beta / math.sqrt(2)))
    return 1 / (1 + beta * cdf / phi)


@dataclass
class SubtreeState:
    own: list[str]
    warming: dict[str, float] = field(default_factory=dict)  # replica → serves from
    backlog: float = 0.0  # requests waiting beyond what the queueing model holds
    made: int = 0  # replicas started, for their names


@dataclass
class Outcome:
    busy_s: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))  # by kind
    provisioned_s: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    requests: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    within_sla: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    latency: dict[str, list[float]] = field(default_factory=dict)  # by kind: weights per 1 ms bin
    events: Counter[str] = field(default_factory=Counter)


def simulate(policy: str, hours: float, seed: int) -> Outcome:
    config, demand = tree()
    settings = config.settings
    borrowing = Borrowing(config) if policy in ("borrowing", "both") else None
    scaler = P99Autoscaler(config) if policy == "both" else None
    rng = random.Random(seed)
    states = {name: SubtreeState(list(subtree.executors)) for name, subtree in config.subtrees.items()}
    home = {e: name for name, state in states.items() for e in state.own}
    outcome = Outcome()
    jitter_mean = math.exp(JITTER**2 / 2)
    step = settings.period_s
    for period in range(int(hours * 3600 / step)):
        now = (period + 1) * step
        hour = (now / 3600) % 24
        serving: dict[str, list[str]] = {name: [] for name in states}
        for name, state in states.items():
            for executor in state.own:
                if state.warming.get(executor, 0.0) <= now:
                    state.warming.pop(executor, None)
                    target = borrowing.serving(executor, name) if borrowing else name
                    serving[target].append(executor)
        loads = {}
        for name, state in states.items():
            subtree = config.subtrees[name]
            arrivals = rate(demand[name], hour) * rng.uniform(0.9, 1.1)
            servers = len(serving[name]) * SLOTS
            service_s = SERVICE_S * jitter_mean
            offered = arrivals * service_s  # Erlangs
            share = min(1.0, offered / servers) if servers and state.backlog == 0 else 1.0
            slower = stretch(share)
            capacity_rps = servers / service_s if servers else 0.0
            state.backlog = max(0.0, state.backlog + (arrivals - capacity_rps) * step)
            busy = servers * share
            waits = 0.0 if offered >= servers or servers == 0 else waiting_probability(servers, offered)
            drain_s = state.backlog / capacity_rps if capacity_rps else step
            sojourn_rate = (servers - offered) / service_s if servers > offered else 0.0
            kind = subtree.kind
            histogram = outcome.latency.setdefault(kind, [0.0] * LATENCY_BINS_MS)
            weight = arrivals * step / SAMPLES
            for _ in range(SAMPLES):
                latency = SERVICE_S * slower * rng.lognormvariate(0, JITTER) + drain_s
                if sojourn_rate and rng.random() < waits:
                    latency += rng.expovariate(sojourn_rate)
                latency_ms = latency * 1000
                histogram[min(LATENCY_BINS_MS - 1, int(latency_ms))] += weight
                outcome.within_sla[kind] += weight * (latency_ms <= subtree.p99_ms)
                if scaler is not None:
                    scaler.observe(name, now - step * rng.random(), latency_ms)
            outcome.requests[kind] += arrivals * step
            outcome.busy_s[kind] += busy / SLOTS * step
            outcome.provisioned_s[kind] += len(state.own) * step
            queued = int(state.backlog + waits * offered / max(1.0, servers - offered))
            loads[name] = SubtreeLoad(spread(round(busy), serving[name]), max(1, servers), queued)
        events = borrowing.tick(now, loads) if borrowing else []
        if scaler is not None:  # a subtree's replicas: its own executors, less those it lent
            lent = (
                Counter(home[e] for loan in borrowing.loans for e in loan.executors)
                if borrowing
                else Counter()
            )
            replicas = {name: len(state.own) - lent[name] for name, state in states.items()}
            events += scaler.tick(now, replicas, {name: len(state.warming) for name, state in states.items()})
        for event in events:
            outcome.events[event.kind] += 1
            if event.kind in (SCALE_UP, SCALE_DOWN):
                resize(
                    states[event.subtree], event.subtree, int(event.figures["desired"]), now, borrowing, home
                )
    return outcome


def spread(in_flight: int, executors: list[str]) -> dict[str, int]:
    """``in_flight`` requests over ``executors``, as evenly as whole requests go."""
    share, rest = divmod(in_flight, max(1, len(executors)))
    return {e: share + (i < rest) for i, e in enumerate(executors)}


def resize(
    state: SubtreeState,
    name: str,
    desired: int,
    now: float,
    borrowing: Borrowing | None,
    home: dict[str, str],
) -> None:
    """Bring the replicas the subtree keeps (its own, less those lent) to ``desired``: start new ones
    (serving after the warm-up) or stop the newest it keeps."""
    lent = {e for loan in borrowing.loans for e in loan.executors} if borrowing else set()
    kept = [e for e in state.own if e not in lent]
    while len(kept) < desired:
        state.made += 1
        replica = f"{name}-n{state.made}"
        state.own.append(replica)
        kept.append(replica)
        state.warming[replica] = now + WARM_UP_S
        home[replica] = name
    for replica in reversed(kept[desired:]):
        state.own.remove(replica)
        state.warming.pop(replica, None)


def p99_ms(histogram: list[float]) -> float:
    total, seen = sum(histogram), 0.0
    for ms, weight in enumerate(histogram):
        seen += weight
        if seen >= 0.99 * total:
            return float(ms + 1)
    return float(LATENCY_BINS_MS)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    policies = {
        "none": "no borrowing, no autoscaling",
        "borrowing": "borrowing only",
        "both": "borrowing and autoscaling",
    }
    results = {}
    for policy in policies:
        started = time.perf_counter()
        results[policy] = simulate(policy, args.hours, args.seed)
        print(
            f"simulated {args.hours:g} h of {policy}: {time.perf_counter() - started:.1f} s", file=sys.stderr
        )
    kinds = ("inference", "training", "batch")
    subtrees = tree()[0].subtrees
    print(
        f"{len(subtrees)} subtrees, {sum(len(s.executors) for s in subtrees.values())} executors at the "
        f"start, {args.hours:g} simulated hours, a unit lent = {UNIT} executors, seed {args.seed}"
    )
    print(f"{'policy':<28} {'kind':<10} {'utilisation':>11} {'p99 ms':>8} {'SLA met':>8}")
    for policy, label in policies.items():
        out = results[policy]
        for kind in (*kinds, "all"):
            chosen = kinds if kind == "all" else (kind,)
            busy = sum(out.busy_s[k] for k in chosen)
            provisioned = sum(out.provisioned_s[k] for k in chosen)
            histogram = [sum(values) for values in zip(*(out.latency[k] for k in chosen), strict=True)]
            within = sum(out.within_sla[k] for k in chosen) / sum(out.requests[k] for k in chosen)
            print(
                f"{label if kind == kinds[0] else '':<28} {kind:<10} {busy / provisioned:>11.1%} "
                f"{p99_ms(histogram):>8.0f} {within:>8.2%}"
            )
    print(f"{'policy':<28} {'borrows':>8} {'returns':>8} {'scale-ups':>10} {'scale-downs':>12}")
    for policy, label in policies.items():
        events = results[policy].events
        counts = f"{events[BORROW]:>8} {events[RETURN]:>8} {events[SCALE_UP]:>10} {events[SCALE_DOWN]:>12}"
        print(f"{label:<28} {counts}")


if __name__ == "__main__":
    main()
