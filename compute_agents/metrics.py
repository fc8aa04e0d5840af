"""Prometheus metrics of one agent (its own registry, so several agents can live in one process)."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .spool import SpoolStatus

_LATENCY_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0)


class AgentMetrics:
    def __init__(self, spool_status: Callable[[], SpoolStatus], snapshot_age: Callable[[], float]) -> None:
        self.registry = CollectorRegistry()
        self._hits = 0
        self._lookups = 0
        r = self.registry
        self.requests = Counter(
            "treemeter_agent_requests", "Requests by route and outcome", ["route", "status"], registry=r
        )
        self.tokens = Counter("treemeter_agent_tokens", "Tokens served", ["direction"], registry=r)
        self.expert_activations = Counter(
            "treemeter_agent_expert_activations",
            "Router activations per expert",
            ["layer", "expert"],
            registry=r,
        )
        self.cache_hits = Counter("treemeter_agent_expert_cache_hits", "L2 expert-cache hits", registry=r)
        self.cache_misses = Counter(
            "treemeter_agent_expert_cache_misses", "L2 expert-cache misses", registry=r
        )
        self.integrity_failures = Counter(
            "treemeter_agent_expert_integrity_failures",
            "Expert files refused for a fingerprint mismatch",
            registry=r,
        )
        self.routed_experts_invalid = Counter(
            "treemeter_agent_routed_experts_invalid",
            "Requests whose engine-reported routing was refused (all zeros, malformed): not billed",
            registry=r,
        )
        self.layer_latency = Histogram(
            "treemeter_agent_layer_latency_seconds",
            "Measured latency per tree layer",
            ["layer"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        depth = Gauge("treemeter_agent_spool_depth", "Records waiting in the spool", registry=r)
        depth.set_function(lambda: spool_status().depth)
        lag = Gauge("treemeter_agent_shipping_lag_seconds", "Age of the oldest unshipped record", registry=r)
        lag.set_function(lambda: _lag(spool_status()))
        age = Gauge("treemeter_agent_snapshot_age_seconds", "Age of the entitlement snapshot", registry=r)
        age.set_function(snapshot_age)
        self.cache_hit_rate = Gauge(
            "treemeter_agent_expert_cache_hit_rate", "L2 hit rate since start", registry=r
        )

    def observe_cache(self, hits: int, misses: int) -> None:
        self.cache_hits.inc(hits)
        self.cache_misses.inc(misses)
        self._hits += hits
        self._lookups += hits + misses
        self.cache_hit_rate.set(self._hits / self._lookups if self._lookups else 0.0)


def _lag(status: SpoolStatus) -> float:
    return 0.0 if status.oldest_spooled_ns is None else (time.time_ns() - status.oldest_spooled_ns) / 1e9
