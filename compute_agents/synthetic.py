"""Synthetic MoE usage records, for the demo and load tests until the real engine (the agent issue)
produces them. Shapes follow a tiny top-2 MoE: per layer a few experts, tokens summing to 2 × tokens."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from treemeter_records import make_record, new_record_id

WEIGHTS_SHA3 = hashlib.sha3_256(b"treemeter-demo-moe-weights").hexdigest()


@dataclass(frozen=True)
class Workload:
    agent_id: str
    tenant: str
    contract: str
    package: str
    sla_class: str = "standard"
    model_id: str = "tiny-qwen3-moe"
    moe_layers: int = 4
    experts: int = 16
    top_k: int = 2


def synthetic_records(
    workload: Workload, *, first_seq: int, count: int, start_ns: int, end_ns: int, seed: int = 7
) -> Iterator[dict[str, Any]]:
    """`count` records with seqs from `first_seq`, start times spread evenly over [start_ns, end_ns)."""
    rng = random.Random(seed)  # noqa: S311 - synthetic load, not secrets
    step = max((end_ns - start_ns) // max(count, 1), 1)
    for index in range(count):
        tokens_in = rng.randint(64, 2048)
        tokens_out = rng.randint(16, 512)
        routed = tokens_in + tokens_out - 1
        experts = _route(rng, workload, routed)
        l1, l2, l3 = rng.randint(200, 900), rng.randint(1_000, 9_000), rng.randint(20_000, 140_000)
        start = start_ns + index * step
        hits = rng.randint(0, 6)
        cached = rng.randint(0, tokens_in // 2)
        # The prompt's full prefix-cache blocks (16 tokens) beyond the cached part are stored: cache writes.
        written = max(0, tokens_in // 16 * 16 - cached)
        yield make_record(
            record_id=new_record_id(),
            agent_id=workload.agent_id,
            seq=first_seq + index,
            tenant=workload.tenant,
            contract=workload.contract,
            package=workload.package,
            client_request_id=f"req-{first_seq + index}",
            model_id=workload.model_id,
            weights_sha3=WEIGHTS_SHA3,
            start_ns=start,
            end_ns=start + (l1 + 2 * l2 + l3 + l1) * 1_000,
            clock_drift_us=rng.randint(-50, 50),
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            sla_class=workload.sla_class,
            hops=[
                {"layer": "L1", "node": "router-1", "latency_us": l1 // 2},
                {"layer": "L2", "node": "cache-1", "latency_us": l2 // 2},
                {"layer": "L3", "node": "gpu-1", "latency_us": l3},
                {"layer": "L2", "node": "cache-1", "latency_us": l2 - l2 // 2},
                {"layer": "L1", "node": "router-1", "latency_us": l1 - l1 // 2},
            ],
            experts=experts,
            prefix_cache_hit_tokens=cached,
            prefix_cache_write_tokens=written,
            expert_cache_hits=hits,
            expert_cache_misses=len(experts) - min(hits, len(experts)),
            status="ok" if rng.random() > 0.02 else "error",
            outcome=None,
        )


def _route(rng: random.Random, workload: Workload, tokens: int) -> list[dict[str, int]]:
    """Per layer, split tokens × top_k activations over a handful of popular experts."""
    experts = []
    for layer in range(workload.moe_layers):
        chosen = sorted(rng.sample(range(workload.experts), k=min(4, workload.experts)))
        remaining = tokens * workload.top_k
        for position, expert in enumerate(chosen):
            share = (
                remaining
                if position == len(chosen) - 1
                else rng.randint(1, remaining - (len(chosen) - position - 1))
            )
            remaining -= share
            experts.append({"layer": layer, "expert": expert, "tokens": share})
    return experts
