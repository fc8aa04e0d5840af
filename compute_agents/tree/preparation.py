"""L2 preparation asked by the router: which experts each domain's requests use, learnt from the
executors' answers, and the ones to preheat sent in the next decision for that domain.

An executor behind a router answers a whole (non-streamed) request with ``x-treemeter-experts``: the
request's most used experts per layer, ``"layer:expert,expert;layer:expert"``. The router keeps the last
``HISTORY`` reports per domain and puts the top ``PER_LAYER`` of each layer in the decision's
``preheat`` claim; the executor preheats those before its forward passes (docs/agent.md).
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict, deque
from typing import Any

EXPERTS_HEADER = "x-treemeter-experts"
HISTORY = 16
PER_LAYER = 4
MAX_HEADER = 2048

Expert = tuple[int, int]  # (layer, expert)


def experts_header(experts: list[dict[str, int]], per_layer: int = PER_LAYER) -> str:
    """A record's ``experts`` list as the header: the ``per_layer`` most used of each layer."""
    by_layer: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for entry in experts:
        by_layer[entry["layer"]].append((entry["tokens"], entry["expert"]))
    parts = []
    for layer in sorted(by_layer):
        top = sorted(by_layer[layer], key=lambda used: (-used[0], used[1]))[:per_layer]
        parts.append(f"{layer}:" + ",".join(str(expert) for _, expert in top))
    return ";".join(parts)


def parse_experts_header(text: str) -> list[Expert]:
    """The experts a header names; an unreadable header names none (it only steers preheating)."""
    if len(text) > MAX_HEADER:
        return []
    found: list[Expert] = []
    try:
        for part in filter(None, text.split(";")):
            layer, _, experts = part.partition(":")
            found.extend((int(layer), int(expert)) for expert in experts.split(",") if expert)
    except ValueError:
        return []
    return [(layer, expert) for layer, expert in found if 0 <= layer < 65536 and 0 <= expert < 65536]


class DomainExperts:
    """Per domain, the experts its recent requests used; ``None`` is the domain of requests without one."""

    def __init__(self, history: int = HISTORY, per_layer: int = PER_LAYER) -> None:
        self.per_layer = per_layer
        self._recent: dict[str | None, deque[list[Expert]]] = defaultdict(lambda: deque(maxlen=history))
        self._lock = threading.Lock()

    def learn(self, domain: str | None, experts: list[Expert]) -> None:
        if experts:
            with self._lock:
                self._recent[domain].append(experts)

    def preheat(self, domain: str | None) -> list[list[int]]:
        """The experts to preheat for a request of ``domain``, as the ``preheat`` claim: [layer, expert]
        pairs, the most reported first within each layer, at most ``per_layer`` a layer."""
        with self._lock:
            counts = Counter(expert for report in self._recent.get(domain, ()) for expert in report)
        taken: Counter[int] = Counter()
        chosen: list[list[int]] = []
        for (layer, expert), _ in sorted(counts.items(), key=lambda item: (item[0][0], -item[1], item[0][1])):
            if taken[layer] < self.per_layer:
                chosen.append([layer, expert])
                taken[layer] += 1
        return chosen

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {domain or "-": len(reports) for domain, reports in self._recent.items()}
